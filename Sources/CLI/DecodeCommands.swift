import AppleDecoding
import Configuration
import Crypto
import Foundation
import Runtime

/// `receipt decode`, `jws verify`: what support and operations run by hand (the seeds decoded
/// receipts with curl and verifyReceipt). Exit 0 verified, 1 not verified, 2 usage error.
let decodeCommands: [CLICommand] = [ReceiptCommand(), JWSCommand()]

/// FILE as bytes: `-` is stdin.
private func readInput(_ path: String) throws -> [UInt8] {
    if path == "-" { return [UInt8](FileHandle.standardInput.readDataToEndOfFile()) }
    guard let data = FileManager.default.contents(atPath: path) else { throw UsageError("cannot read \(path)") }
    return [UInt8](data)
}

/// The `--root` certificates; without any, the configured ones (`configured`: the decode worker's
/// setting), so support staff on a configured host verify as the pipeline does.
private func loadRoots(_ arguments: Arguments, configured: Setting) throws -> [X509Certificate] {
    var paths = arguments.values("root")
    if paths.isEmpty, let list = Environment.given(configured) {
        paths = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }
    return try paths.map { path in
        do { return try AppleDecodingConfiguration.loadCertificate(path) } catch { throw UsageError(String(describing: error)) }
    }
}

/// One JSON object on stdout (sorted keys: stable output for scripts and diffs).
private func printJSON(_ object: [String: Any]) {
    let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])) ?? Data("{}".utf8)
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}

struct ReceiptCommand: CLICommand {
    let name = "receipt"
    let summary = "Decode an app receipt (PKCS#7, base64 or raw; also an upload/verifyReceipt JSON holding one) and verify it against --root certificates at its creation date."
    let usage = "decode FILE|- [--root CERT]... (default: \(Setting.receiptRoots)) [--bundle-id ID] [--device-id UUID] [--no-strict] [--json]"
    let optionNames: Set<String> = ["root", "bundle-id", "device-id"]
    let flagNames: Set<String> = ["json", "no-strict"]

    func run(_ arguments: Arguments) throws -> Int32 {
        guard arguments.positionals.count == 2, arguments.positionals[0] == "decode" else { throw UsageError("expected: receipt decode FILE") }
        let roots = try loadRoots(arguments, configured: .receiptRoots)
        let raw = try readInput(arguments.positionals[1])
        let json = arguments.has("json")
        guard let der = Self.receiptBytes(raw) else { return fail("input is neither base64 text, a JSON document holding a receipt, nor raw DER", json: json) }
        if LegacyTransactionReceipt.looksLikeOne(der) {
            guard let legacy = LegacyTransactionReceipt.parse(der) else { return fail("unreadable iOS 6-style transaction receipt", json: json) }
            let reason = "iOS 6-style transaction receipt: only Apple's verifyReceipt can vouch for it (its chain is not embedded)"
            emit(["legacy_transaction_receipt": legacy.purchaseInfo, "environment": legacy.environment,
                  "signature_matches_embedded_certificate": legacy.signatureMatchesEmbeddedCertificate,
                  "verified": false, "error": reason], json: json)
            return 1
        }
        let verifier = try AppReceiptVerifier(roots: roots, bundleIds: Set(arguments.values("bundle-id")), strictChecks: !arguments.has("no-strict"))
        var output: [String: Any]
        var verified = false
        switch verifier.verify(der) {
        case .success(let result):
            output = Self.render(result.receipt)
            output["signer"] = result.signer.subjectSummary
            verified = true
        case .failure(let failure):
            guard case .success(let receipt) = AppReceiptVerifier.decodeUnverified(der) else { return fail(failure.description, json: json) }
            output = Self.render(receipt)
            output["error"] = roots.isEmpty ? "not verified: no --root certificate given (nor \(Setting.receiptRoots))" : failure.description
        }
        output["verified"] = verified
        if let device = arguments.value("device-id"), case .success(let receipt) = AppReceiptVerifier.decodeUnverified(der) {
            guard let bytes = AppReceiptVerifier.uuidBytes(device) else { throw UsageError("--device-id must be a UUID") }
            let matches = AppReceiptVerifier.matchesDevice(receipt, deviceIdentifier: bytes)
            output["device_hash_matches"] = matches
            if !matches { verified = false; output["verified"] = false }
        }
        emit(output, json: json)
        return verified ? 0 : 1
    }

    /// base64 text (whitespace allowed), JSON with a receipt field, or raw DER/BER.
    static func receiptBytes(_ raw: [UInt8]) -> [UInt8]? {
        if let object = (try? JSONSerialization.jsonObject(with: Data(raw))) as? [String: Any] {
            for field in ["receipt_data", "receipt-data", "transactionReceipt", "latest_receipt"] {
                if let text = object[field] as? String { return Base64.decode(text) }
            }
            // A V1 notification since 2021, or a verifyReceipt answer: the receipt under unified_receipt.
            if let text = (object["unified_receipt"] as? [String: Any])?["latest_receipt"] as? String { return Base64.decode(text) }
            return nil
        }
        if let decoded = Base64.decode(String(decoding: raw, as: UTF8.self)), !decoded.isEmpty { return decoded }
        return raw.first == 0x30 ? raw : nil
    }

    /// verifyReceipt's field names and string conventions, which support staff already read.
    static func render(_ receipt: AppReceipt) -> [String: Any] {
        var object: [String: Any] = ["bundle_id": receipt.bundleId,
                                     "opaque_value": receipt.opaqueValue.map { String(format: "%02x", $0) }.joined(),
                                     "sha1_hash": receipt.sha1Hash.map { String(format: "%02x", $0) }.joined(),
                                     "in_app": receipt.inApp.map(render)]
        object["receipt_type"] = receipt.receiptType
        object["app_item_id"] = receipt.appItemId.map { String($0) }
        object["application_version"] = receipt.appVersion
        object["original_application_version"] = receipt.originalAppVersion
        addDate(&object, "receipt_creation_date", receipt.creationDateMs)
        addDate(&object, "expiration_date", receipt.expirationDateMs)
        addDate(&object, "original_purchase_date", receipt.originalPurchaseDateMs)
        return object
    }

    static func render(_ purchase: InAppPurchase) -> [String: Any] {
        var object: [String: Any] = ["quantity": String(purchase.quantity), "product_id": purchase.productId,
                                     "transaction_id": purchase.transactionId,
                                     "original_transaction_id": purchase.originalTransactionId]
        addDate(&object, "purchase_date", purchase.purchaseDateMs)
        addDate(&object, "original_purchase_date", purchase.originalPurchaseDateMs)
        addDate(&object, "expires_date", purchase.expiresDateMs)
        addDate(&object, "cancellation_date", purchase.cancellationDateMs)
        object["web_order_line_item_id"] = purchase.webOrderLineItemId
        object["is_trial_period"] = purchase.isTrialPeriod.map { $0 ? "true" : "false" }
        object["is_in_intro_offer_period"] = purchase.isInIntroOfferPeriod.map { $0 ? "true" : "false" }
        object["promotional_offer_id"] = purchase.promotionalOfferId
        object["product_type"] = purchase.productType.map { String($0) }
        return object
    }

    private static func addDate(_ object: inout [String: Any], _ name: String, _ ms: Int64?) {
        guard let ms else { return }
        object[name] = RFC3339.format(ms: ms)
        object[name + "_ms"] = String(ms)
    }

    private func emit(_ object: [String: Any], json: Bool) {
        if json { return printJSON(object) }
        var lines: [String] = []
        for key in object.keys.sorted() where key != "in_app" { lines.append("\(key): \(object[key]!)") }
        if let purchases = object["in_app"] as? [[String: Any]] {
            lines.append("in_app: \(purchases.count) purchase(s)")
            for purchase in purchases {
                lines.append("  - " + purchase.keys.sorted().map { "\($0)=\(purchase[$0]!)" }.joined(separator: " "))
            }
        }
        print(lines.joined(separator: "\n"))
    }

    private func fail(_ reason: String, json: Bool) -> Int32 {
        if json { printJSON(["error": reason]) } else { FileHandle.standardError.write(Data("error: \(reason)\n".utf8)) }
        return 1
    }
}

struct JWSCommand: CLICommand {
    let name = "jws"
    let summary = "Verify App Store signed data (V2 notification, signed transaction or renewal info) as Apple's SignedDataVerifier does. FILE: a JWS or a {\"signedPayload\": ...} body. Without --bundle-id/--environment/--app-apple-id the payload's own values are used (signature and chain are still checked)."
    let usage = "verify FILE|- --root CERT [--root CERT]... [--bundle-id ID] [--environment Sandbox|Production|Xcode|LocalTesting] [--app-apple-id N] [--kind notification|transaction|renewal-info] [--no-strict] [--json]"
    let optionNames: Set<String> = ["root", "bundle-id", "environment", "app-apple-id", "kind"]
    let flagNames: Set<String> = ["json", "no-strict"]

    func run(_ arguments: Arguments) throws -> Int32 {
        guard arguments.positionals.count == 2, arguments.positionals[0] == "verify" else { throw UsageError("expected: jws verify FILE") }
        let roots = try loadRoots(arguments, configured: .appleRoots)
        guard !roots.isEmpty else { throw UsageError("--root CERT is required (Apple Root CA - G3 for App Store data), or \(Setting.appleRoots)") }
        let text = String(decoding: try readInput(arguments.positionals[1]), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let token = ((try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any])?["signedPayload"] as? String ?? text
        let unverified = Self.unverifiedPayload(token)
        let kind = try arguments.value("kind").map { value -> String in
            guard ["notification", "transaction", "renewal-info"].contains(value) else { throw UsageError("--kind must be notification, transaction or renewal-info") }
            return value
        } ?? Self.guessKind(unverified)
        let app = Self.appFields(unverified, kind: kind)
        let environment: AppStoreEnvironment
        if let name = arguments.value("environment") {
            guard let parsed = AppStoreEnvironment(lenient: name) else { throw UsageError("unknown --environment \(name)") }
            environment = parsed
        } else {
            environment = app.environment.flatMap(AppStoreEnvironment.init(rawValue:)) ?? .production
        }
        let appAppleId = try arguments.value("app-apple-id").map { value -> Int64 in
            guard let number = Int64(value) else { throw UsageError("--app-apple-id must be an integer") }
            return number
        } ?? app.appAppleId ?? (environment == .production ? -1 : nil)
        let verifier = try SignedDataVerifier(roots: roots, bundleId: arguments.value("bundle-id") ?? app.bundleId ?? "",
                                              appAppleId: appAppleId, environments: [environment],
                                              strictChecks: !arguments.has("no-strict"))
        let result: Result<VerifiedSignedData, JWSVerificationFailure>
        switch kind {
        case "transaction": result = verifier.verifyTransaction(token)
        case "renewal-info": result = verifier.verifyRenewalInfo(token)
        default: result = verifier.verifyNotification(token)
        }
        var output: [String: Any] = ["kind": kind]
        switch result {
        case .success(let verified):
            output["status"] = "VERIFIED"
            output["payload"] = verified.payload
        case .failure(let failure):
            output["status"] = failure.status.rawValue
            output["reason"] = failure.reason
            if let unverified { output["payload"] = unverified }
        }
        if arguments.has("json") {
            printJSON(output)
        } else {
            print("\(output["status"]!) (\(kind))" + ((output["reason"] as? String).map { ": \($0)" } ?? ""))
            if let payload = output["payload"] as? [String: Any],
               let data = try? JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys, .prettyPrinted]) {
                print(String(decoding: data, as: UTF8.self))
            }
        }
        return result.failureValue == nil ? 0 : 1
    }

    static func unverifiedPayload(_ token: String) -> [String: Any]? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let bytes = Base64URL.decode(parts[1]) else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }

    static func guessKind(_ payload: [String: Any]?) -> String {
        guard let payload else { return "notification" }
        if payload["notificationType"] != nil { return "notification" }
        if payload["transactionId"] != nil || payload["bundleId"] != nil { return "transaction" }
        return "renewal-info"
    }

    static func appFields(_ payload: [String: Any]?, kind: String) -> (bundleId: String?, appAppleId: Int64?, environment: String?) {
        guard let payload else { return (nil, nil, nil) }
        let source = kind == "notification"
            ? (payload["data"] ?? payload["summary"] ?? payload["externalPurchaseToken"] ?? payload["appData"]) as? [String: Any] ?? [:]
            : payload
        var environment = source["environment"] as? String
        if let id = source["externalPurchaseId"] as? String { environment = id.hasPrefix("SANDBOX") ? "Sandbox" : "Production" }
        return (source["bundleId"] as? String, (source["appAppleId"] as? NSNumber)?.int64Value, environment)
    }
}

extension Result {
    var failureValue: Failure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}
