import Auth
import Foundation
import Runtime

/// The credentials every test cluster is started with (the defaults stay strict: tests present
/// keys rather than switching checks off). Fixed strings, so the secret-grep test knows what to
/// look for.
enum TestCredentials {
    static let serviceKey = "slk_test_service_5b0d3f1e9a7c4e2b8d6f0a1c3e5b7d9f"
    /// A second service key, as during a rotation.
    static let rotatedServiceKey = "slk_test_rotated_8e2a4c6b0d1f3a5c7e9b2d4f6a8c0e1b"
    static let adminKey = "sla_test_support_1c3e5a7b9d0f2e4a6c8b1d3f5a7c9e0b"
    /// TestSupport.V1Notification's default `password`.
    static let v1Secret = "storeledger-test-secret"
    static let jwtSecret = Array("test-jwt-hs256-secret-4f7a9c2e6b1d8f3a5c0e7b9d".utf8)
    static let issuer = "https://login.storeledger.test"
    static let audience = "storeledger-test"

    static let jwtSecretPath: String = {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("storeledger-test-jwt-\(getpid()).secret").path
        try! PrivateFile.write(jwtSecret, to: path)   // a test machine that cannot write its temporary directory cannot run these tests
        return path
    }()

    static var environment: [String: String] {
        ["STORELEDGER_API_KEYS": "backend=\(APIKeyRing.hash(serviceKey)),backend-next=\(APIKeyRing.hash(rotatedServiceKey))",
         "STORELEDGER_ADMIN_KEYS": "support=\(APIKeyRing.hash(adminKey))",
         "STORELEDGER_JWT_HS256_SECRET_FILES": jwtSecretPath,
         "STORELEDGER_JWT_ISSUER": issuer, "STORELEDGER_JWT_AUDIENCE": audience,
         "STORELEDGER_V1_SHARED_SECRETS": v1Secret]
    }

    static func userToken(_ user: String, issuedAt: Date = Date(), lifetime: TimeInterval = 600, secret: [UInt8] = jwtSecret,
                          issuer: String = issuer) -> String {
        JWTMinter.hs256(secret: secret, issuer: issuer, audience: audience, subject: user, issuedAt: issuedAt, lifetime: lifetime)
    }

    static func bearer(_ token: String) -> String { "Bearer \(token)" }
}
