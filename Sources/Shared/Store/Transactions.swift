import Postgres

/// Transaction control for callers that hold a transaction open across calls (a stage's batch, a
/// replay); bodies that fit in a closure use `PGConnection.transaction`.
extension PGConnection {
    public func begin() throws { try executeScript("BEGIN") }
    public func commit() throws { try executeScript("COMMIT") }
    public func rollback() throws { try executeScript("ROLLBACK") }
}
