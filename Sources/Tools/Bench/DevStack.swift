/// A running `storeledger dev` as `bench e2e` drives it. The CLI starts it (the bench runs inside the
/// binary that has the `dev` command), so this module names only what the bench reads of it.
public protocol DevStack: Sendable {
    var ingestURL: String { get }
    /// The processes dev started, by role (`ingest`, `decode`, …).
    var pids: [String: Int32] { get }
    /// `DATABASE_URL` and `POSTGRES_DIR`, as dev reported them.
    var values: [String: String] { get }
    func stop()
}
