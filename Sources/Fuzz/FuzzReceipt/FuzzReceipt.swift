import AppleDecoding
import Configuration
import Crypto
import Foundation
import FuzzDriver

/// libFuzzer target: the receipt parsers (ASN.1 payload, PKCS#7 through OpenSSL, iOS 6 plist),
/// and, when the bytes parse as PKCS#7, verification against Apple's root.
func fuzzOne(_ bytes: [UInt8]) {
    _ = AppReceipt.parse(payload: bytes)
    _ = AppReceiptVerifier.decodeUnverified(bytes)
    if LegacyTransactionReceipt.looksLikeOne(bytes) { _ = LegacyTransactionReceipt.parse(bytes) }
    if let verifier = FuzzSetup.verifier { _ = verifier.verify(bytes) }
}

enum FuzzSetup {
    /// Setting.fuzzReceiptRoot or the fixtures' Apple Inc. Root, when present.
    static let verifier: AppReceiptVerifier? = {
        let path = FuzzConfiguration.process.receiptRoot
        guard let root = try? AppleDecodingConfiguration.loadCertificate(path) else { return nil }
        return try? AppReceiptVerifier(roots: [root])
    }()
}

/// libFuzzer's driver or a replay of saved inputs (`FuzzDriver.run`).
@main
struct Entry {
    static func main() { FuzzDriver.run(fuzzOne) }
}
