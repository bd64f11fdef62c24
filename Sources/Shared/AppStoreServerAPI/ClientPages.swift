import AppleDecoding
import Foundation

/// Pages, verification and bounds: every answer is decoded, bounded and verified here before a
/// client method returns it.
extension AppStoreServerAPIClient {
    func historyPage(id: String, revision: String?, request: TransactionHistoryRequest, _ env: AppStoreEnvironment) -> Result<TransactionPage, APIFailure> {
        var query = request.queryItems
        if let revision { query.insert(("revision", revision), at: 0) }
        return perform(Endpoint(method: "GET", path: "/inApps/v2/history/\(id)", query: query), env)
            .flatMap { decode(HistoryResponse.self, $0, env) }
            .flatMap { response in
                if let problem = appProblem(bundleId: response.bundleId, environment: response.environment, env) {
                    return .failure(APIFailure(.invalidResponse, problem, environment: env))
                }
                return page(response.signedTransactions, revision: response.revision, hasMore: response.hasMore, env)
            }
    }

    func refundPage(id: String, revision: String?, _ env: AppStoreEnvironment) -> Result<TransactionPage, APIFailure> {
        perform(Endpoint(method: "GET", path: "/inApps/v2/refund/lookup/\(id)", query: revision.map { [("revision", $0)] } ?? []), env)
            .flatMap { decode(RefundHistoryResponse.self, $0, env) }
            .flatMap { page($0.signedTransactions, revision: $0.revision, hasMore: $0.hasMore, env) }
    }

    func page(_ signed: [String]?, revision: String?, hasMore: Bool?, _ env: AppStoreEnvironment) -> Result<TransactionPage, APIFailure> {
        cursor(revision, "revision", env, required: false).flatMap { revision in
            verifyTransactions(signed ?? [], env).map {
                TransactionPage(environment: env, revision: revision, hasMore: hasMore ?? false, transactions: $0,
                                signedTransactions: signed ?? [])
            }
        }
    }

    func walk(start: String?, _ env: AppStoreEnvironment, _ fetch: (String?) -> Result<TransactionPage, APIFailure>) -> Result<TransactionWalk, APIFailure> {
        var guardrail = PageCursor(maxPages: settings.maxPages)
        var transactions: [VerifiedSignedData] = []
        var signed: [String] = []
        var revision = start
        var next = start
        repeat {
            switch fetch(next) {
            case .failure(let failure): return .failure(failure)
            case .success(let page):
                transactions += page.transactions
                signed += page.signedTransactions
                if let pageRevision = page.revision { revision = pageRevision }
                next = guardrail.next(hasMore: page.hasMore, cursor: page.revision)
            }
        } while next != nil
        return .success(TransactionWalk(environment: env, transactions: transactions, signedTransactions: signed, revision: revision,
                                        pages: guardrail.pages, truncated: guardrail.truncated))
    }

    func notificationPage(_ request: NotificationHistoryRequest, token: String?, _ env: AppStoreEnvironment) -> Result<NotificationHistoryPage, APIFailure> {
        Endpoint.json(request).flatMap { body in
            perform(Endpoint(method: "POST", path: "/inApps/v1/notifications/history",
                             query: token.map { [("paginationToken", $0)] } ?? [], body: body), env)
        }
        .flatMap { decode(NotificationHistoryResponse.self, $0, env) }
        .flatMap { response in
            let items = response.notificationHistory ?? []
            guard items.count <= APILimits.maxItemsPerPage else {
                return .failure(APIFailure(.invalidResponse, "\(items.count) notifications in one page (limit \(APILimits.maxItemsPerPage))", environment: env))
            }
            return cursor(response.paginationToken, "paginationToken", env, required: false).flatMap { token in
                var entries: [NotificationHistoryEntry] = []
                for item in items {
                    guard let signed = item.signedPayload else {
                        return .failure(APIFailure(.invalidResponse, "notification history item without signedPayload", environment: env))
                    }
                    switch verifyNotification(signed, attempts: item.sendAttempts, env) {
                    case .failure(let failure): return .failure(failure)
                    case .success(let entry): entries.append(entry)
                    }
                }
                return .success(NotificationHistoryPage(environment: env, paginationToken: token, hasMore: response.hasMore ?? false, entries: entries))
            }
        }
    }

    func verifyNotification(_ signed: String, attempts: [SendAttemptItem]?, _ env: AppStoreEnvironment) -> Result<NotificationHistoryEntry, APIFailure> {
        let attempts = attempts ?? []
        guard attempts.count <= APILimits.maxSendAttempts else {
            return .failure(APIFailure(.invalidResponse, "\(attempts.count) send attempts (limit \(APILimits.maxSendAttempts))", environment: env))
        }
        guard signed.utf8.count <= APILimits.maxSignedDataBytes else {
            return .failure(APIFailure(.invalidResponse, "signedPayload over \(APILimits.maxSignedDataBytes) bytes", environment: env))
        }
        switch verifier.verifyNotification(signed) {
        case .failure(let failure):
            return .failure(APIFailure(.invalidResponse, "notification does not verify: \(failure)", environment: env))
        case .success(let verified):
            return .success(NotificationHistoryEntry(signedPayload: signed, notification: verified, sendAttempts: attempts))
        }
    }

    func verifyTransactions(_ signed: [String], _ env: AppStoreEnvironment) -> Result<[VerifiedSignedData], APIFailure> {
        guard signed.count <= APILimits.maxItemsPerPage else {
            return .failure(APIFailure(.invalidResponse, "\(signed.count) signed transactions in one answer (limit \(APILimits.maxItemsPerPage))", environment: env))
        }
        var verified: [VerifiedSignedData] = []
        for item in signed {
            guard item.utf8.count <= APILimits.maxSignedDataBytes else {
                return .failure(APIFailure(.invalidResponse, "signed transaction over \(APILimits.maxSignedDataBytes) bytes", environment: env))
            }
            switch verifier.verifyTransaction(item) {
            case .failure(let failure):
                return .failure(APIFailure(.invalidResponse, "signed transaction does not verify: \(failure)", environment: env))
            case .success(let data): verified.append(data)
            }
        }
        return .success(verified)
    }

    func verifyStatuses(_ response: StatusResponse, _ env: AppStoreEnvironment) -> Result<SubscriptionStatuses, APIFailure> {
        if let problem = appProblem(bundleId: response.bundleId, environment: response.environment, env) {
            return .failure(APIFailure(.invalidResponse, problem, environment: env))
        }
        let items = response.data ?? []
        guard items.count <= APILimits.maxItemsPerPage else {
            return .failure(APIFailure(.invalidResponse, "\(items.count) subscription groups (limit \(APILimits.maxItemsPerPage))", environment: env))
        }
        var groups: [SubscriptionStatuses.Group] = []
        for item in items {
            let last = item.lastTransactions ?? []
            guard last.count <= APILimits.maxLastTransactionsPerGroup else {
                return .failure(APIFailure(.invalidResponse, "\(last.count) last transactions in one group", environment: env))
            }
            var verified: [SubscriptionStatuses.LastTransaction] = []
            for entry in last {
                guard let signed = entry.signedTransactionInfo else {
                    return .failure(APIFailure(.invalidResponse, "status item without signedTransactionInfo", environment: env))
                }
                let transaction: VerifiedSignedData
                switch verifyTransactions([signed], env) {
                case .failure(let failure): return .failure(failure)
                case .success(let list): transaction = list[0]
                }
                var renewal: VerifiedSignedData?
                if let signedRenewal = entry.signedRenewalInfo {
                    guard signedRenewal.utf8.count <= APILimits.maxSignedDataBytes else {
                        return .failure(APIFailure(.invalidResponse, "signed renewal info over \(APILimits.maxSignedDataBytes) bytes", environment: env))
                    }
                    switch verifier.verifyRenewalInfo(signedRenewal) {
                    case .failure(let failure):
                        return .failure(APIFailure(.invalidResponse, "signed renewal info does not verify: \(failure)", environment: env))
                    case .success(let data): renewal = data
                    }
                }
                verified.append(.init(rawStatus: entry.rawStatus, originalTransactionId: entry.originalTransactionId,
                                      transaction: transaction, renewalInfo: renewal, signedTransactionInfo: signed,
                                      signedRenewalInfo: entry.signedRenewalInfo))
            }
            groups.append(.init(subscriptionGroupIdentifier: item.subscriptionGroupIdentifier, lastTransactions: verified))
        }
        return .success(SubscriptionStatuses(environment: env, groups: groups))
    }

    /// The answer names our app and the environment we asked (when it names them at all).
    func appProblem(bundleId: String?, environment: String?, _ env: AppStoreEnvironment) -> String? {
        if let bundleId, bundleId != verifier.bundleId { return "answer is for bundle \(bundleId.prefix(128)), expected \(verifier.bundleId)" }
        if let environment, environment != env.rawValue { return "answer is for environment \(environment.prefix(32)), asked \(env.rawValue)" }
        return nil
    }

    func cursor(_ value: String?, _ what: String, _ env: AppStoreEnvironment, required: Bool) -> Result<String?, APIFailure> {
        guard let value, !value.isEmpty else {
            return required ? .failure(APIFailure(.invalidResponse, "answer has no \(what)", environment: env)) : .success(nil)
        }
        guard value.utf8.count <= APILimits.maxCursorBytes else {
            return .failure(APIFailure(.invalidResponse, "\(what) over \(APILimits.maxCursorBytes) bytes", environment: env))
        }
        return .success(value)
    }

    func historyProblem(_ request: NotificationHistoryRequest) -> String? {
        guard request.startDate < request.endDate else { return "startDate must be before endDate" }
        let nowMs = Int64(now().timeIntervalSince1970 * 1000)
        guard request.startDate >= nowMs - NotificationHistoryRequest.maxHistoryMs else {
            return "startDate is more than 180 days ago: Apple keeps no older history"
        }
        return nil
    }

    func decode<T: Decodable>(_ type: T.Type, _ body: [UInt8], _ env: AppStoreEnvironment) -> Result<T, APIFailure> {
        do {
            return .success(try JSONDecoder().decode(type, from: Data(body)))
        } catch {
            return .failure(APIFailure(.invalidResponse, "answer is not a \(T.self)", environment: env))
        }
    }
}
