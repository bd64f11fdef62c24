/// R18: environments never merge. Apple numbers `original_transaction_id`s per environment, so the
/// same id in Production, Sandbox, Xcode and LocalTesting is four subscriptions. The key of a
/// Production subscription is its `original_transaction_id`; any other environment's key carries the
/// environment after an `@` (`2000000123456789@Sandbox`), so every purchase id, alias, grant and
/// ledger line built on the key is scoped to its environment.
public enum SubscriptionKey {
    public static let production = "Production"
    /// Apple's environments as StoreLedger names them, Production first (where a bare
    /// `original_transaction_id` is looked for first).
    public static let environments = [production, "Sandbox", "Xcode", "LocalTesting"]

    public static func make(originalTransactionId: String, environment: String) -> String {
        environment == production ? originalTransactionId : "\(originalTransactionId)@\(environment)"
    }

    /// An environment as a reader may spell it (any case; V1's "PROD"), in StoreLedger's name.
    static func environment(named text: String) -> String? {
        switch text.lowercased() {
        case "production", "prod": return production
        case "localtesting", "local-testing", "local_testing": return "LocalTesting"
        default: return environments.first { $0.lowercased() == text.lowercased() }
        }
    }

    /// A key as a reader may write it: the environment after `@` in any spelling `environment(named:)`
    /// takes (`…@sandbox`, `…@PROD`), else the key as given.
    public static func normalized(_ key: String) -> String {
        guard let at = key.lastIndex(of: "@"), let environment = environment(named: String(key[key.index(after: at)...])) else { return key }
        return make(originalTransactionId: String(key[..<at]), environment: environment)
    }
}

/// R17: how user ids compare. StoreKit sends `appAccountToken` in lower case while apps often
/// print the same UUID in upper case, so an id that is a UUID is one user whatever its case;
/// any other id is compared exactly (an app's own ids may be case-sensitive).
public enum UserId {
    public static func normalized(_ id: String) -> String {
        isUUID(id) ? id.lowercased() : id
    }

    /// Whether two ids name one user. Compared byte for byte after normalising, as PostgreSQL
    /// compares them: Swift's `==` treats canonically equivalent strings (`é` and `e` with a
    /// combining accent) as equal, which would let one user's token read another user's rows.
    public static func same(_ a: String, _ b: String) -> Bool {
        normalized(a).utf8.elementsEqual(normalized(b).utf8)
    }

    /// 8-4-4-4-12 hexadecimal digits.
    static func isUUID(_ id: String) -> Bool {
        let utf8 = Array(id.utf8)
        guard utf8.count == 36 else { return false }
        for (index, byte) in utf8.enumerated() {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard byte == UInt8(ascii: "-") else { return false }
            } else {
                let hex = (byte >= 48 && byte <= 57) || (byte >= 65 && byte <= 70) || (byte >= 97 && byte <= 102)
                guard hex else { return false }
            }
        }
        return true
    }
}
