/// A running `storeledger dev` stack as `bench e2e` drives it. The CLI starts it (its `DevStack`
/// lives beside the `dev` command), so this module names only what the bench reads of it.
public protocol RunningDev: Sendable {
    var ingestURL: String { get }
    var databaseURL: String { get }
    /// The processes dev started, by role (`ingest`, `decode`, …).
    var pids: [String: Int32] { get }
    /// The private PostgreSQL's data directory (its processes' CPU counts), nil for a given database.
    var postgresDirectory: String? { get }
    func stop()
}
