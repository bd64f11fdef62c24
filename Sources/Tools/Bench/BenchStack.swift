import Foundation
import LocalStack

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
