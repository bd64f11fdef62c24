import Bench
import Configuration
import Foundation
import Runtime

/// `storeledger bench <suite>`: speed measured side by side in one run (ratios), see BENCHMARKS.md.
/// Each suite lives in the Bench module (Sources/Tools/Bench), one file each, with a `run(_ arguments:) throws -> Int32`.
struct BenchCommand: CLICommand {
    let name = "bench"
    let summary = "Run a benchmark suite: decode | sign | fold | pipeline | e2e | scale | replay | all. Prints figures and ratios; see BENCHMARKS.md."
    let usage = "decode|sign|fold|pipeline|e2e|scale|replay|all [suite options]"
    let optionNames: Set<String> = ["seconds", "events", "rate", "bootstrap", "database-url", "python", "runs", "subscriptions", "renewals", "warmup"]
    let flagNames: Set<String> = ["json", "quick", "one-stack", "interleaved"]

    func run(_ arguments: Arguments) throws -> Int32 {
        guard let suite = arguments.positionals.first else { throw UsageError("name a suite") }
        let suites: [String: (Arguments) throws -> Int32] = [
            "decode": DecodeBench.run, "sign": SignBench.run, "pipeline": PipelineBench.run, "e2e": { try E2EBench.run($0) { try DevStack.start(.simulator(environment: $0, partitions: $1)) } },
            "scale": ScaleBench.run, "replay": ReplayBench.run, "fold": FoldBench.run,
        ]
        if suite == "all" {
            var status: Int32 = 0
            for name in ["decode", "sign", "fold", "pipeline", "e2e"] {
                // decode needs Apple's published samples; without them the other suites still run.
                if name == "decode", !DecodeBench.hasFixtures(arguments) {
                    print("decode: skipped, Apple's sample data not found (\(Setting.fixtures), docs/configuration.md)")
                    continue
                }
                status = max(status, try suites[name]!(arguments))
            }
            return status
        }
        guard let run = suites[suite] else { throw UsageError("unknown suite \(suite)") }
        return try run(arguments)
    }
}

/// bench e2e drives the same stack as `storeledger dev` and `simulate --dev`.
extension DevStack: RunningDev {
    var postgresDirectory: String? { stack.postgres?.directory }
}
