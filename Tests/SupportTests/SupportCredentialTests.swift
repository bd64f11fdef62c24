@testable import Ingest
import Auth
import Crypto
import Foundation
import XCTest

/// The support pages take the admin key only: as Bearer, or as the HTTP Basic password a browser
/// sends after the 401's Basic challenge.
final class SupportCredentialTests: XCTestCase {
    private let adminKey = "sla_unit_admin_key_0123456789abcdef"
    private let serviceKey = "slk_unit_service_key_0123456789abcdef"

    private var authenticator: Authenticator {
        Authenticator(apiKeys: APIKeyRing(entries: [
            .init(name: "admin", role: .admin, sha256: SHA256.hash(Array(adminKey.utf8))),
            .init(name: "service", role: .service, sha256: SHA256.hash(Array(serviceKey.utf8))),
        ]), jwt: nil)
    }

    private func basic(_ user: String, _ password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    func testOnlyTheAdminKeyIsAdmittedAsBearerOrBasicPassword() {
        XCTAssertNil(SupportAdmission.decide("Bearer \(adminKey)", authenticator))
        XCTAssertNil(SupportAdmission.decide(basic("agent", adminKey), authenticator))
        XCTAssertNil(SupportAdmission.decide(basic("", adminKey), authenticator), "any user name")
        XCTAssertEqual(SupportAdmission.decide("Bearer \(serviceKey)", authenticator)?.status, 403)
        XCTAssertEqual(SupportAdmission.decide(basic("agent", serviceKey), authenticator)?.status, 403)
    }

    func testEveryRefusalWithoutAnAdminCredentialIsABasicChallenge() {
        for header in [nil, "Bearer wrong", basic("agent", "wrong"), "Basic !!!not-base64", "Basic " + Data("no-colon".utf8).base64EncodedString(),
                       "Bearer " + String(repeating: "k", count: 9000)] as [String?] {
            let refusal = SupportAdmission.decide(header, authenticator)
            XCTAssertEqual(refusal?.status, 401, header ?? "none")
            XCTAssertEqual(refusal?.headers["WWW-Authenticate"]?.hasPrefix("Basic realm=\"storeledger support\""), true, header ?? "none")
        }
    }
}
