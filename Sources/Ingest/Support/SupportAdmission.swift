import Auth
import Foundation
import HTTPServer

/// Who may open the support pages: an admin key only (they show any user's ledger and raw
/// records). Support staff use a browser, which cannot add a bearer header, so HTTP Basic is
/// accepted too, with the admin key as the password (any user name); a 401 carries a Basic
/// challenge, so the browser asks for it. Pure apart from the authenticator it is given.
enum SupportAdmission {
    static let realm = "storeledger support"
    /// An Authorization header longer than this is refused unread (a key or token is far shorter).
    static let maxHeaderBytes = 8 * 1024

    static func decide(_ authorization: String?, _ authenticator: Authenticator, now: Date = Date()) -> HTTPResponse? {
        switch admit(authorization, authenticator, now: now) {
        case .success: nil
        case .failure(let refusal): refusal.response
        }
    }

    /// A refusal, sent as is.
    struct Refusal: Error {
        let response: HTTPResponse
    }

    /// The admin principal the request acts as, or why not.
    static func admit(_ authorization: String?, _ authenticator: Authenticator, now: Date = Date()) -> Result<Principal, Refusal> {
        guard let authorization else { return .failure(challenge("the support pages need the admin key (HTTP Basic password or Bearer)")) }
        guard authorization.utf8.count <= maxHeaderBytes else { return .failure(challenge("Authorization header too long")) }
        let bearer: String
        if authorization.lowercased().hasPrefix("basic ") {
            guard let decoded = Data(base64Encoded: String(authorization.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
                  let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":") else {
                return .failure(challenge("Basic credentials must be base64 of user:password"))
            }
            bearer = "Bearer " + text[text.index(after: colon)...]
        } else {
            bearer = authorization
        }
        switch authenticator.authenticate(authorization: bearer, now: now) {
        case .authenticated(let principal):
            guard case .admin = principal else {
                return .failure(Refusal(response: .error(status: 403, reason: "the support pages need an admin key")))
            }
            return .success(principal)
        case .anonymous:
            return .failure(challenge("the support pages need the admin key"))
        case .refused(let failure):
            return .failure(challenge(failure.reason))
        }
    }

    private static func challenge(_ reason: String) -> Refusal {
        var response = HTTPResponse.error(status: 401, reason: reason)
        response.headers.set(name: "WWW-Authenticate", value: "Basic realm=\"\(realm)\", charset=\"UTF-8\"")
        return Refusal(response: response)
    }
}
