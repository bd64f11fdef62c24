import AppleDecoding
import Configuration
import Crypto
import Foundation
import FuzzDriver

/// libFuzzer target: the JWS parser and verifier, as notification, transaction and renewal info.
func fuzzOne(_ bytes: [UInt8]) {
    let token = String(decoding: bytes, as: UTF8.self)
    _ = FuzzSetup.verifier.verifyNotification(token)
    _ = FuzzSetup.verifier.verifyTransaction(token)
    _ = FuzzSetup.verifier.verifyRenewalInfo(token)
}

enum FuzzSetup {
    /// Apple's test CA (Setting.fuzzJWSRoot or the fixtures' copy), non-strict like Apple's
    /// tests, so seeds signed with the test chain reach the signature and app checks.
    static let verifier: SignedDataVerifier = {
        let path = FuzzConfiguration.process.jwsRoot
        let roots = (try? AppleDecodingConfiguration.loadCertificate(path)).map { [$0] } ?? []
        return try! SignedDataVerifier(roots: roots, bundleId: "com.example", appAppleId: 1234,
                                       environments: [.sandbox, .production], strictChecks: false)
    }()
}

/// libFuzzer's driver or a replay of saved inputs (`FuzzDriver.run`).
@main
struct Entry {
    static func main() { FuzzDriver.run(fuzzOne) }
}
