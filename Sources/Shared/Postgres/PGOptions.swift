import Foundation
import Synchronization

/// Client-side limits every connection gets (docs/configuration.md, "PostgreSQL"), so an
/// unreachable or hung server turns into an error the caller can classify as an outage instead
/// of a thread blocked for minutes: libpq's `connect_timeout`, the session's `statement_timeout`,
/// and TCP keepalives so a peer that vanished without a FIN (host down, network cut) is noticed.
public struct PGOptions: Sendable, Equatable {
    /// libpq `connect_timeout` in seconds (libpq's minimum effective value is 2).
    public var connectTimeoutSeconds = 5
    /// The session's `statement_timeout` in milliseconds; 0 disables it.
    public var statementTimeoutMs = 30_000
    /// `keepalives_idle` in seconds (then 3 probes 5 s apart).
    public var keepaliveIdleSeconds = 10
    /// libpq `fallback_application_name`: which StoreLedger process a session in
    /// `pg_stat_activity` belongs to, unless the URL names one itself.
    public var applicationName = "storeledger"
    /// Prepare statements seen twice on a connection (`PreparedStatements`). Off for a pooler that
    /// hands one client's statements to several server sessions (PgBouncer's transaction mode
    /// before 1.21), where a session would lack the names.
    public var preparesStatements = true
    /// The session only reads and writes rows by key (a stage's batch: its subscriptions, users,
    /// events), never most of a table (issue 14):
    /// - sequential scans and parallel plans are priced out (`enable_seqscan=off`,
    ///   `max_parallel_workers_per_gather=0`): until autovacuum has analyzed a young table (a minute
    ///   after a deployment or a bulk load), or while its statistics are stale, the planner expects a
    ///   list of keys to match a third of a table and reads it whole, 5–50 ms per lookup instead of well
    ///   under one at 1,000 events/s. With an index on the key it now takes the index; without one it
    ///   still scans;
    /// - no plan is compiled (`jit=off`): a priced-out scan where no index serves costs more than JIT's
    ///   threshold, and compiling takes tens of milliseconds;
    /// - prepared statements keep one generic plan (`plan_cache_mode=force_generic_plan`): with
    ///   whole-table scans priced out it is an index plan whatever the table's size, and planning every
    ///   run was a third of the statements' time in small batches.
    public var keyedAccess = false

    public init() {}

    private static let configured = Mutex(PGOptions())

    /// What connections use unless given other options: this process's settings, validated and
    /// set once at startup (`configureProcess`); the defaults until then.
    public static var process: PGOptions { configured.withLock { $0 } }

    /// This process's settings for a session that reads and writes by key only (`keyedAccess`).
    public static var keyed: PGOptions {
        var options = process
        options.keyedAccess = true
        return options
    }

    public static func configureProcess(connectTimeoutSeconds: Int?, statementTimeoutMs: Int?, applicationName: String? = nil,
                                        preparesStatements: Bool? = nil) {
        configured.withLock { options in
            options = PGOptions()
            if let preparesStatements { options.preparesStatements = preparesStatements }
            if let applicationName { options.applicationName = applicationName }
            if let connectTimeoutSeconds { options.connectTimeoutSeconds = connectTimeoutSeconds }
            if let statementTimeoutMs { options.statementTimeoutMs = statementTimeoutMs }
        }
    }

    /// libpq keywords appended after the caller's URL (later keywords win in PQconnectdbParams).
    /// `options` sets the session parameters at connect time (no statement): the output formats
    /// this module parses, whatever the server's defaults, and the statement timeout. It replaces
    /// an `options` parameter of the URL. `plan_cache_mode=force_custom_plan`: a prepared statement
    /// saves its parse, not its plan. PostgreSQL's default switches a statement to a generic plan
    /// after five runs and keeps it until the table's statistics change; a plan made while a table
    /// was small (a sequential scan) then stays while the table grows, and `bench e2e` measured
    /// PostgreSQL's CPU per event doubling (issue 14). Planned per run, it follows the table. A keyed
    /// session (`keyedAccess`) prices whole-table scans out instead and keeps one generic plan. A
    /// keyed session (a stage's) also ends a transaction left idle for `idleTransactionMs`: a frozen
    /// worker (SIGSTOP, a paused VM) holding row locks would otherwise stall the member that took
    /// over its partitions until it woke; a live one is idle in a transaction only while the broker
    /// acknowledges its outputs or Apple answers a consumption request, far less.
    static let idleTransactionMs = 300_000

    var connectKeywords: [(String, String)] {
        [("connect_timeout", String(connectTimeoutSeconds)), ("fallback_application_name", applicationName), ("keepalives", "1"),
         ("keepalives_idle", String(keepaliveIdleSeconds)), ("keepalives_interval", "5"), ("keepalives_count", "3"),
         ("client_encoding", "UTF8"),
         ("options", "-c DateStyle=ISO,MDY -c TimeZone=UTC -c bytea_output=hex -c statement_timeout=\(statementTimeoutMs)"
             + (keyedAccess ? " -c plan_cache_mode=force_generic_plan -c enable_seqscan=off -c max_parallel_workers_per_gather=0 -c jit=off"
                              + " -c idle_in_transaction_session_timeout=\(Self.idleTransactionMs)"
                            : " -c plan_cache_mode=force_custom_plan"))]
    }
}
