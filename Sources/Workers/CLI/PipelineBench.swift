import Runtime

/// Benchmark suite of issue 6; replaced by its real implementation.
enum PipelineBench {
    static func run(_ arguments: Arguments) throws -> Int32 {
        print("PipelineBench: not built yet (issue 6)")
        return 1
    }
}
