import Runtime

/// Benchmark suite of issue 4; replaced by its real implementation.
enum SignBench {
    static func run(_ arguments: Arguments) throws -> Int32 {
        print("SignBench: not built yet (issue 4)")
        return 1
    }
}
