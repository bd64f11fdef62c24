import Foundation
import Configuration
import LocalStack
import Runtime

extension StackPlan {
    /// The benches' stack: the broker in this process (CPU figures count it, as they count the stages
    /// run in process), a private PostgreSQL, migrated; no children.
    public static func benchmark(partitions: Int) throws -> StackPlan {
        var plan = StackPlan(executable: try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
        plan.broker = .inProcess
        plan.partitions = partitions
        return plan
    }
}

extension BenchConfiguration {
    /// The bench settings of this process (a flag of the list before its variable); every problem
    /// found is one usage error.
    static func read(_ arguments: Arguments) throws -> BenchConfiguration {
        var flags: [String: String] = [:]
        for setting in Setting.all { if let flag = setting.flag, let value = arguments.value(flag) { flags[flag] = value } }
        do {
            return try ConfigurationReader.read(ProcessEnvironment.current, flags: flags, roles: [.bench], BenchConfiguration.init)
        } catch {
            throw UsageError(error.description)
        }
    }
}
