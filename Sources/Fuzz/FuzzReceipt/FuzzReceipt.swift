import AppleDecoding
import Configuration
import Crypto
import Foundation

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

/// Fuzzing build (-DSTORELEDGER_FUZZING, -sanitize=fuzzer): hand control to libFuzzer's driver.
/// Plain build: replay saved inputs (crashers, corpus files), `FuzzReceipt FILE...`.
@main
struct Entry {
    static func main() {
        #if STORELEDGER_FUZZING
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in
            fuzzOne(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
            return 0
        })
        #else
        for path in CommandLine.arguments.dropFirst() {
            guard let data = FileManager.default.contents(atPath: path) else { continue }
            fuzzOne([UInt8](data))
        }
        #endif
    }
}

#if STORELEDGER_FUZZING
/// libFuzzer's entry for programs that keep their own `main` (SwiftPM names the executable's entry).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<Int32>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32
#endif
