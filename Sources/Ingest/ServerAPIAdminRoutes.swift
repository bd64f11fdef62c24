import Domain
import Foundation
import HTTPServer

/// Admin routes that ask Apple on demand (issue 16), kept apart from ingest's own routes so the
/// admin authentication of issue 11 can wrap them like the others. The work itself is injected
/// (the CLI builds it with the App Store Server API client and the signer's token exchange), so
/// ingest gains no dependency on Apple's API.
///
/// - `POST /v1/admin/refresh/{transactionId}`: one refresh (transaction history since the stored
///   revision plus all subscription statuses, fed to the pipeline); 200 with the report, 400 for an
///   id Apple's API cannot take, 404 for one Apple does not know, 502 when Apple could not be asked.
/// - `GET /v1/admin/users/{userId}/consumption`: the consumption answers sent for the user.
public struct ServerAPIAdminRoutes: Sendable {
    /// The work for one id: the HTTP status and the JSON body.
    public typealias Answer = @Sendable (String) -> (status: Int, json: Data)
    let refresh: Answer
    let consumption: Answer?

    public init(refresh: @escaping Answer, consumption: Answer? = nil) {
        self.refresh = refresh
        self.consumption = consumption
    }

    /// The answer when `segments` is one of these routes, else nil.
    public func answer(_ request: HTTPRequest, segments: [String]) -> HTTPResponse? {
        guard segments.count >= 3, segments[0] == "v1", segments[1] == "admin" else { return nil }
        switch (request.method, segments.count, segments[2]) {
        case ("POST", 4, "refresh"):
            return run(refresh, segments[3], "transaction id")
        case ("GET", 5, "users") where segments[4] == "consumption":
            return consumption.map { run($0, segments[3], "user id") }
        default:
            return nil
        }
    }

    private func run(_ work: Answer, _ id: String, _ name: String) -> HTTPResponse {
        if let reason = EdgeChecks.pathIdentifier(id, name) { return .error(status: 400, reason: reason) }
        let (status, json) = work(id)
        return .json(status: status, data: json)
    }
}
