import Configuration
import Crypto
import Domain
import Foundation
import Ingest
import Postgres
import Runtime
import Signer
import Store

/// `signer`, `offer sign`, `offer eligibility` (issue 4).
let offerCommands: [CLICommand] = [SignerCommand(), OfferCommand()]

struct SignerCommand: CLICommand {
    let name = "signer"
    let summary = "Run the promotional-offer signing worker: the only process holding the .p8 keys. Consumes storeledger.offers.sign.requests, answers on .replies; opens no listening socket (metrics go to a file) unless --admin-port asks for /healthz, /readyz, /metrics."
    let usage = "[--bootstrap B] [--keys KEYID=FILE.p8,...] [--default-key-id ID] [--issuer-id ID] [--metrics-file F] [--group G] [--admin-port P] [--admin-host H]   (or KAFKA_BOOTSTRAP_SERVERS, \(Setting.signingKeys), \(Setting.signingDefaultKeyId), \(Setting.signingIssuerId), \(Setting.signerMetricsFile), \(Setting.noncesPerHour))"
    let optionNames: Set<String> = ["bootstrap", "keys", "default-key-id", "issuer-id", "metrics-file", "group", "admin-port", "admin-host"]

    func run(_ arguments: Arguments) throws -> Int32 {
        let settings = try Environment.read(arguments, SignerConfiguration.init)
        guard let spec = settings.keys else {
            throw UsageError("no signing keys: pass --keys KEYID=/path/AuthKey.p8 or set \(Setting.signingKeys)")
        }
        let ring = try SigningKeyRing.load(spec: spec, defaultKeyId: settings.defaultKeyId)
        var sizing = NonceRegistry.Sizing()
        if let perHour = settings.noncesPerHour {
            sizing.expectedPerSlice = perHour
        }
        let signer = OfferSigner(keys: ring, issuerId: settings.issuerId,
                                 nonces: NonceRegistry(sizing: sizing))
        var config = SignerWorkerConfig(kafka: try Environment.kafka(arguments, clientId: "storeledger-signer"))
        config.groupId = arguments.value("group") ?? config.groupId
        config.metricsFile = settings.metricsFile
        config.loopPolicy = try Environment.loopPolicy(arguments)
        // For people: readiness is the admin /readyz (with --admin-port).
        print("signer: keys \(ring.keys.keys.sorted().joined(separator: ","))")
        fflush(nil)
        // No admin socket unless --admin-port is given: the signer's default is to listen on nothing.
        let worker = SignerWorker(signer: signer, config: config)
        return try runServices(worker, reason: { worker.readinessReason }, arguments, logger: Logger(component: "signer"))
    }
}

struct OfferCommand: CLICommand {
    let name = "offer"
    let summary = "Promotional offers by hand: `sign` makes a legacy signature with a .p8 key (operators, tests); `eligibility` shows what an account may have and why."
    let usage = """
        sign --key FILE.p8 --key-id ID --bundle-id B --product P --offer O --username U [--nonce N] [--timestamp MS] [--json]
               offer eligibility --user U [--group G] [--catalog FILE] [--database-url URL | --states FILE.json] [--now MS]
        """
    let optionNames: Set<String> = ["key", "key-id", "bundle-id", "product", "offer", "username", "nonce", "timestamp",
                                    "user", "group", "catalog", "database-url", "states", "now"]
    let flagNames: Set<String> = ["json"]

    func run(_ arguments: Arguments) throws -> Int32 {
        switch arguments.positionals.first {
        case "sign": return try sign(arguments)
        case "eligibility": return try eligibility(arguments)
        default: throw UsageError("name a subcommand: sign or eligibility")
        }
    }

    private func required(_ arguments: Arguments, _ name: String) throws -> String {
        guard let value = arguments.value(name), !value.isEmpty else { throw UsageError("--\(name) is required") }
        return value
    }

    private func sign(_ arguments: Arguments) throws -> Int32 {
        let keyId = try required(arguments, "key-id")
        let key = try SigningKeyRing.loadKey(path: try required(arguments, "key"), id: keyId)
        let nonce: String
        if let given = arguments.value("nonce") {
            guard UUID(uuidString: given) != nil else { throw UsageError("--nonce must be a UUID") }
            nonce = given
        } else {
            nonce = try OfferSigner.randomNonce().uuidString
        }
        let timestamp = try arguments.value("timestamp").map { text -> Int64 in
            guard let value = Int64(text), value >= 0 else { throw UsageError("--timestamp must be milliseconds since 1970") }
            return value
        } ?? currentTimeMs()
        let payload = PromotionalOfferPayload(bundleId: try required(arguments, "bundle-id"), keyIdentifier: keyId,
                                              productIdentifier: try required(arguments, "product"),
                                              offerIdentifier: try required(arguments, "offer"),
                                              applicationUsername: arguments.value("username") ?? "", nonce: nonce, timestampMs: timestamp)
        let signed = try OfferSigner.sign(payload, key: key)
        if arguments.has("json") {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(signed), as: UTF8.self))
        } else {
            print("keyIdentifier=\(signed.keyIdentifier)\nnonce=\(signed.nonce)\ntimestamp=\(signed.timestamp)\nsignature=\(signed.signature)")
        }
        return 0
    }

    /// The pure eligibility rules on an account's history from PostgreSQL or a JSON file of
    /// `SubscriptionState`s (support staff replaying a case; tests).
    private func eligibility(_ arguments: Arguments) throws -> Int32 {
        let user = try required(arguments, "user")
        guard let catalogPath = Environment.value(arguments, option: "catalog", setting: .catalog),
              let data = FileManager.default.contents(atPath: catalogPath) else { throw UsageError("a readable --catalog (or \(Setting.catalog)) is required") }
        let catalog: Catalog
        do { catalog = try Catalog.load(json: [UInt8](data), source: catalogPath) } catch { throw UsageError(error.description) }
        let states: [SubscriptionState]
        if let path = arguments.value("states") {
            guard let file = FileManager.default.contents(atPath: path) else { throw UsageError("cannot read --states \(path)") }
            states = try JSONDecoder().decode([SubscriptionState].self, from: file).filter { $0.userId == user }
        } else if let url = Environment.databaseURL(arguments) {
            let db = try PGConnection(url: url)
            states = try MembershipQueries(db).subscriptions(ofUser: user)
        } else {
            throw UsageError("give --states FILE.json or --database-url (or DATABASE_URL)")
        }
        let now = try arguments.value("now").map { text -> Int64 in
            guard let value = Int64(text) else { throw UsageError("--now must be milliseconds since 1970") }
            return value
        } ?? currentTimeMs()
        let rules = OfferEligibility(catalog: catalog)
        let history = OfferHistory(states: states)
        let groups = arguments.value("group").map { [$0] }
            ?? Array(Set(catalog.products.filter { $0.kind == .autoRenewable }.map { $0.group ?? $0.id })).sorted()
        var output: [[String: Any]] = []
        for group in groups {
            let intro = rules.introOffer(group: group, history: history)
            output.append([
                "group": group,
                "introOffer": ["eligible": intro.eligible, "reason": intro.reason],
                "products": rules.variants(group: group, history: history).map {
                    ["productId": $0.productId, "introVariant": $0.introVariant ?? NSNull(), "show": $0.show] as [String: Any]
                },
                "offers": rules.offers(group: group, history: history, nowMs: now).map { verdict -> [String: Any] in
                    ["offerId": verdict.offer.id, "eligible": verdict.isEligible, "redemptions": verdict.redemptions,
                     "code": verdict.refusal?.code ?? NSNull(), "reason": verdict.refusal?.message ?? NSNull()]
                },
            ])
        }
        let json = try JSONSerialization.data(withJSONObject: ["userId": user, "groups": output], options: [.sortedKeys, .withoutEscapingSlashes])
        print(String(decoding: json, as: UTF8.self))
        return 0
    }
}
