import Auth
import Configuration
import Foundation
import Runtime

/// `storeledger credentials`: makes what docs/security.md asks operators to configure, so no key
/// is ever typed into a shell history by hand.
struct CredentialsCommand: CLICommand {
    let name = "credentials"
    let summary = "new-key: print a new API key and the name=sha256 entry for \(Setting.apiKeys)/\(Setting.adminKeys); hash-key: hash a key read from stdin; user-token: sign an HS256 end-user token for testing."
    let usage = "new-key [--name N] [--admin] | hash-key [--name N] < key | user-token --user U --secret-file F --issuer I --audience A [--lifetime-s S]"
    let optionNames: Set<String> = ["name", "user", "secret-file", "issuer", "audience", "lifetime-s"]
    let flagNames: Set<String> = ["admin"]

    func run(_ arguments: Arguments) throws -> Int32 {
        switch arguments.positionals.first {
        case "new-key":
            let admin = arguments.has("admin")
            let key = try APIKeyRing.generateKey(prefix: admin ? "sla" : "slk")
            let entry = "\(arguments.value("name") ?? (admin ? "support" : "backend"))=\(APIKeyRing.hash(key))"
            print("key:    \(key)   (give it to the client once; StoreLedger keeps only the hash)")
            print("config: \(admin ? Setting.adminKeys : Setting.apiKeys) entry \(entry)")
        case "hash-key":
            let key = (readLine(strippingNewline: true) ?? "").trimmingCharacters(in: .whitespaces)
            guard !key.isEmpty, key.utf8.count <= APIKeyRing.maxKeyBytes else { throw UsageError("give the key on stdin (1...\(APIKeyRing.maxKeyBytes) bytes)") }
            print("\(arguments.value("name") ?? "backend")=\(APIKeyRing.hash(key))")
        case "user-token":
            guard let user = arguments.value("user"), let file = arguments.value("secret-file"),
                  let issuer = arguments.value("issuer"), let audience = arguments.value("audience") else {
                throw UsageError("user-token needs --user, --secret-file, --issuer and --audience")
            }
            guard var secret = FileManager.default.contents(atPath: file).map({ [UInt8]($0) }) else { throw UsageError("cannot read \(file)") }
            while let last = secret.last, last == 0x0A || last == 0x0D { secret.removeLast() }
            let lifetime = try arguments.int("lifetime-s", default: 3600)
            guard (1...86_400 * 30).contains(lifetime) else { throw UsageError("--lifetime-s must be 1...2592000") }
            print(JWTMinter.hs256(secret: secret, issuer: issuer, audience: audience, subject: user, lifetime: TimeInterval(lifetime)))
        default:
            throw UsageError("name an action: new-key, hash-key or user-token")
        }
        return 0
    }
}
