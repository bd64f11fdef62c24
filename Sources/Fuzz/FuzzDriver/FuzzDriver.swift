import Foundation
import Synchronization

/// The `main` of every fuzz target. Fuzzing build (-DSTORELEDGER_FUZZING, -sanitize=fuzzer): hand
/// control to libFuzzer's driver. Plain build: replay saved inputs (crashers, corpus files),
/// `FuzzX FILE...`, each through `replay` (by default the fuzzed function itself).
public enum FuzzDriver {
    public static func run(_ fuzzOne: @escaping @Sendable ([UInt8]) -> Void,
                           replay: ((_ path: String, _ bytes: [UInt8]) -> Void)? = nil) -> Never {
        #if STORELEDGER_FUZZING
        target.withLock { $0 = fuzzOne }
        var argc = CommandLine.argc
        var argv = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in
            // A C callback captures nothing: the target comes from the one the driver was given.
            let fuzz = target.withLock { $0 }
            fuzz?(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
            return 0
        })
        #else
        for path in CommandLine.arguments.dropFirst() {
            guard let data = FileManager.default.contents(atPath: path) else { continue }
            if let replay { replay(path, [UInt8](data)) } else { fuzzOne([UInt8](data)) }
        }
        exit(0)
        #endif
    }
}

#if STORELEDGER_FUZZING
private let target = Mutex<(@Sendable ([UInt8]) -> Void)?>(nil)

/// libFuzzer's entry for programs that keep their own `main` (SwiftPM names the executable's entry).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<Int32>,
                         _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32) -> Int32
#endif
