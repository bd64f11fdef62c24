import AppStoreServerAPI
import AppleDecoding
import Domain
import Foundation
import Kafka
import Postgres
import Runtime
import Store

/// Who asks for what and why: validated once, before anything is sent.
public struct SupportOrder {
    var days: Int32
    var reasonCode: ExtendReasonCode
    var admin: String
    var reason: String
    var requestId: String

    public init(_ arguments: Arguments) throws {
        let days = try arguments.int("days", default: 0)
        guard (1...90).contains(days) else { throw UsageError("--days must be 1...90 (Apple's limit per extension)") }
        guard let code = Int32(arguments.value("reason-code") ?? ""), let reasonCode = ExtendReasonCode(rawValue: code) else {
            throw UsageError("--reason-code must be 0...3")
        }
        guard let admin = arguments.value("admin"), (1...128).contains(admin.utf8.count),
              let reason = arguments.value("reason"), (1...1000).contains(reason.utf8.count) else {
            throw UsageError("--admin (1-128 bytes) and --reason (1-1000 bytes) are required: every action is recorded with them")
        }
        let requestId = arguments.value("request-id") ?? UUID().uuidString.lowercased()
        // It is a path segment of the mass extension's status URL: an id the status request could not
        // name would extend every subscriber and leave the outcome unreadable.
        guard case .success = PlainId.check(requestId, "--request-id") else {
            throw UsageError("--request-id must be 1...128 of A-Z a-z 0-9 . _ - (a UUID by default)")
        }
        self.days = Int32(days)
        self.reasonCode = reasonCode
        self.admin = admin
        self.reason = reason
        self.requestId = requestId
    }
}

public struct SupportReport: Codable, Sendable {
    var kind: String
    var target: String
    var requestIdentifier: String
    var environment: String?
    var admin: String
    var succeeded: Bool?
    var effectiveDate: Int64?
    var succeededCount: Int64?
    var failedCount: Int64?
    var complete: Bool?
    public var error: String?
    public var refresh: RefreshReport?

    public var summary: String {
        if let error { return "support \(kind) \(target): FAILED \(error)" }
        if kind == "extend" {
            return "support extend \(target) by \(admin): success \(succeeded ?? false), renews \(effectiveDate.map { TimeText.iso($0) } ?? "?")"
                + (refresh.map { "; " + $0.summary } ?? "")
        }
        return "support mass-extend \(target) by \(admin) (request \(requestIdentifier)): complete \(complete ?? false), "
            + "succeeded \(succeededCount ?? 0), failed \(failedCount ?? 0)"
    }
}

/// Sends the extension and records it, whatever Apple answered (an attempt is evidence too).
public struct SupportActions {
    let client: AppStoreServerAPIClient
    let database: PGConnection

    public init(client: AppStoreServerAPIClient, database: PGConnection) {
        self.client = client
        self.database = database
    }

    public func extend(_ otid: String, _ order: SupportOrder, environment: AppStoreEnvironment?) -> SupportReport {
        let request = ExtendRenewalDateRequest(extendByDays: order.days, extendReasonCode: order.reasonCode, requestIdentifier: order.requestId)
        var report = SupportReport(kind: "extend", target: otid, requestIdentifier: order.requestId, admin: order.admin)
        // The client's own fallback hides which environment answered; asked one at a time, the
        // action is recorded under the subscription it extended (a Sandbox one is `otid@Sandbox`).
        var asked = environment ?? client.settings.environment
        var answer = client.extendRenewalDate(originalTransactionId: otid, request, environment: asked)
        if environment == nil, client.settings.sandboxFallback, asked == .production, case .failure(let failure) = answer,
           failure.errorCode?.meansUnknownInThisEnvironment == true {
            asked = .sandbox
            answer = client.extendRenewalDate(originalTransactionId: otid, request, environment: asked)
        }
        report.environment = asked.rawValue
        switch answer {
        case .success(let answer):
            report.succeeded = answer.success
            report.effectiveDate = answer.effectiveDate
            if answer.success != true { report.error = "Apple did not extend the renewal date" }
        case .failure(let failure):
            report.error = failure.description
        }
        let target = SubscriptionKey.make(originalTransactionId: otid, environment: asked.rawValue)
        record(target: target, request: request, order, &report)
        return report
    }

    public func massExtend(_ product: String, storefronts: [String]?, _ order: SupportOrder, environment: AppStoreEnvironment?,
                    waitSeconds: Int) -> SupportReport {
        let request = MassExtendRenewalDateRequest(extendByDays: order.days, extendReasonCode: order.reasonCode, requestIdentifier: order.requestId,
                                                   storefrontCountryCodes: storefronts, productId: product)
        var report = SupportReport(kind: "mass-extend", target: product, requestIdentifier: order.requestId,
                                   environment: (environment ?? .production).rawValue, admin: order.admin)
        switch client.extendRenewalDateForAllActiveSubscribers(request, environment: environment) {
        case .failure(let failure):
            report.error = failure.description
        case .success:
            // Apple works through the subscribers asynchronously: poll its status for a while.
            let deadline = Date().addingTimeInterval(TimeInterval(max(0, min(waitSeconds, 600))))
            repeat {
                if case .success(let status) = client.massExtensionStatus(productId: product, requestIdentifier: order.requestId,
                                                                          environment: environment) {
                    report.complete = status.complete
                    report.succeededCount = status.succeededCount
                    report.failedCount = status.failedCount
                    if status.complete == true { break }
                }
                Thread.sleep(forTimeInterval: 1)
            } while Date() < deadline
        }
        record(target: "product:\(product)@\(report.environment ?? "Production")", request: request, order, &report)
        return report
    }

    private func record<Request: Encodable>(target: String, request: Request, _ order: SupportOrder, _ report: inout SupportReport) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        do {
            try ServerAPIStore.recordSupportAction(target: target, kind: report.kind, admin: order.admin, reason: order.reason,
                                                   request: String(decoding: try encoder.encode(request), as: UTF8.self),
                                                   outcome: String(decoding: try encoder.encode(report), as: UTF8.self), db: database)
        } catch {
            report.error = (report.error.map { $0 + "; " } ?? "") + "not recorded: \(error)"
        }
    }
}
