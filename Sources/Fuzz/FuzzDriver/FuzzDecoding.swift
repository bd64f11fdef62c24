import AppleDecoding
import Configuration
import Foundation

extension FuzzDriver {
    /// What the routed decoders trust while fuzzed: V2 against Apple's test CA and local receipts
    /// against Apple's root, both from Setting.fuzzFixtures (default the fixtures' copies), for
    /// bundle com.example in the sandbox, with X.509 checks as lenient as Apple's tests.
    public static func decodingConfiguration() -> AppleDecodingConfiguration {
        var config = AppleDecodingConfiguration()
        let fixtures = FuzzConfiguration.process.fixtures
        config.appleRoots = (try? AppleDecodingConfiguration.loadCertificate(fixtures + "/apple-lib/certs/testCA.der")).map { [$0] } ?? []
        config.receiptRoots = (try? AppleDecodingConfiguration.loadCertificate(fixtures + "/certs/apple-real/AppleIncRootCertificate.cer")).map { [$0] } ?? []
        config.bundleId = "com.example"
        config.environments = [.sandbox]
        config.strictX509 = false
        return config
    }
}
