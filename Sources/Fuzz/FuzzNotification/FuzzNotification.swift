import AppleDecoding
import Configuration
import Crypto
import Domain
import Foundation

/// libFuzzer target: the whole router on raw bodies, as ingest writes them: V1 JSON (both shapes),
/// V2 `{"signedPayload"}` bodies, and receipt uploads `{"user_id", "receipt_data"}`.
func fuzzOne(_ bytes: [UInt8]) {
    _ = FuzzSetup.decoder.decode(RawInput(source: .appStoreNotification, body: bytes, receivedAtMs: 0, position: nil))
    _ = FuzzSetup.decoder.decode(RawInput(source: .appReceipt, body: bytes, receivedAtMs: 0, position: nil))
}

enum FuzzSetup {
    static let decoder: AppleInputDecoder = {
        var config = AppleDecodingConfiguration()
        let fixtures = FuzzConfiguration.process.fixtures
        config.appleRoots = (try? AppleDecodingConfiguration.loadCertificate(fixtures + "/apple-lib/certs/testCA.der")).map { [$0] } ?? []
        config.receiptRoots = (try? AppleDecodingConfiguration.loadCertificate(fixtures + "/certs/apple-real/AppleIncRootCertificate.cer")).map { [$0] } ?? []
        config.bundleId = "com.example"
        config.environments = [.sandbox]
        config.strictX509 = false
        config.v1SharedSecrets = ["dummy_shared_secret"]
        return try! config.makeDecoder()
    }()
}

/// Fuzzing build (-DSTORELEDGER_FUZZING, -sanitize=fuzzer): hand control to libFuzzer's driver.
/// Plain build: replay saved inputs (crashers, corpus files), `FuzzNotification FILE...`.
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
