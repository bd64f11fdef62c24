import Runtime

/// Benchmark suite of issue 3; replaced by its real implementation.
enum DecodeBench {
    static func run(_ arguments: Arguments) throws -> Int32 {
        print("DecodeBench: not built yet (issue 3)")
        return 1
    }
}
