import AppleDecoding
import Configuration
import Crypto
import Foundation

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

/// Fuzzing build (-DSTORELEDGER_FUZZING, -sanitize=fuzzer): hand control to libFuzzer's driver.
/// Plain build: replay saved inputs (crashers, corpus files), `FuzzJWS FILE...`.
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
