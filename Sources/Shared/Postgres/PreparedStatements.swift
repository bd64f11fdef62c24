/// Which statements one connection has prepared on the server, and how often it has seen the others.
///
/// A text runs unprepared the first time and is prepared from the second (pgjdbc's
/// `prepareThreshold` idea): one-off statements (migrations, the tools' queries) never cost a
/// prepare, the stages' per-batch statements pay their parse once per connection (planned per run, or once in a keyed session: `PGOptions`). Both
/// tables are bounded, so statements whose text varies cannot grow them without end.
struct PreparedStatements {
    /// A statement as the server prepares it: its text and its parameters' types.
    struct Key: Hashable {
        var text: String
        var types: [UInt32]
    }

    static let maxPrepared = 256
    static let maxCounted = 4_096

    private var names: [Key: String] = [:]
    private var seenOnce: Set<Key> = []
    /// Names are never reused on a connection, so one forgotten here but still on the server cannot clash.
    private var lastNumber = 0

    /// The statement's name and whether it must be prepared first; nil: run it unprepared.
    mutating func name(for key: Key) -> (name: String, isNew: Bool)? {
        if let name = names[key] { return (name, false) }
        guard seenOnce.remove(key) != nil else {
            if seenOnce.count >= Self.maxCounted { seenOnce.removeAll() }
            seenOnce.insert(key)
            return nil
        }
        guard names.count < Self.maxPrepared else { return nil }
        lastNumber += 1
        let name = "storeledger_\(lastNumber)"
        names[key] = name
        return (name, true)
    }

    mutating func forget(_ key: Key) { names[key] = nil }

    /// After a reconnect (a new session has none), or when the server says a name is gone or stale.
    mutating func forgetAll() {
        names.removeAll()
        seenOnce.removeAll()
    }

    /// The server refused a prepared statement itself, not its data: it no longer exists (26000: a
    /// pooler's `DISCARD ALL`), or its result type changed under it (0A000: "cached plan must not
    /// change result type", after a migration altered a table). Prepared again, it runs.
    static func invalidates(_ error: PGError) -> Bool {
        error.sqlState == "26000" || error.sqlState == "0A000"
    }
}
