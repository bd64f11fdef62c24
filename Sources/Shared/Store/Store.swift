import Postgres

/// The one owner of StoreLedger's schema and of every SQL statement the product runs. Other modules
/// call its typed functions (a repository per concern: `DedupeStore`, `MembershipStore`,
/// `SupportQueries`...) and never write SQL text; a source scan (StoreTests) keeps it so.
public enum Store {
    /// Brings the database to this binary's schema (`Schema.migrations`); returns the versions applied.
    @discardableResult
    public static func migrate(_ conn: PGConnection) throws -> [Int] {
        try Migrator.migrate(conn, Schema.migrations)
    }
}
