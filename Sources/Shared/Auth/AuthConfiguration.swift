import Foundation

/// Client authentication settings from the environment, validated in one place
/// (docs/security.md lists each variable):
/// - STORELEDGER_API_KEYS, STORELEDGER_ADMIN_KEYS: `name=<hex SHA-256 of the key>,...`
/// - STORELEDGER_JWT_ISSUER, STORELEDGER_JWT_AUDIENCE (both required once any JWT key is set),
///   STORELEDGER_JWT_USER_CLAIM (default `sub`), STORELEDGER_JWT_LEEWAY_S (default 60, 0...300)
/// - keys: STORELEDGER_JWT_JWKS_FILE, STORELEDGER_JWT_PUBLIC_KEY_FILES (comma-separated PEM files),
///   STORELEDGER_JWT_HS256_SECRET_FILES (comma-separated files, each one secret of 32+ bytes;
///   files, so a secret never sits in the process environment or a command line)
public struct AuthConfiguration: Sendable {
    public var authenticator: Authenticator

    public init(authenticator: Authenticator) { self.authenticator = authenticator }

    public static func fromEnvironment(_ env: [String: String] = ProcessInfo.processInfo.environment) throws(AuthConfigurationError) -> AuthConfiguration {
        func value(_ name: String) -> String? {
            env[name].map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 }
        }
        func files(_ name: String) -> [String] {
            (value(name) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        func read(_ path: String, _ variable: String) throws(AuthConfigurationError) -> [UInt8] {
            guard let data = FileManager.default.contents(atPath: path) else { throw AuthConfigurationError("\(variable): cannot read \(path)") }
            return [UInt8](data)
        }
        let service = try APIKeyRing.parse(value("STORELEDGER_API_KEYS") ?? "", role: .service, variable: "STORELEDGER_API_KEYS")
        let admin = try APIKeyRing.parse(value("STORELEDGER_ADMIN_KEYS") ?? "", role: .admin, variable: "STORELEDGER_ADMIN_KEYS")
        if let clash = service.first(where: { s in admin.contains { $0.sha256 == s.sha256 } }) {
            throw AuthConfigurationError("key \(clash.name) is both a service and an admin key: give support a key of its own")
        }
        var keys: [JWTKey] = []
        for path in files("STORELEDGER_JWT_HS256_SECRET_FILES") {
            var secret = try read(path, "STORELEDGER_JWT_HS256_SECRET_FILES")
            while let last = secret.last, last == 0x0A || last == 0x0D { secret.removeLast() }
            guard secret.count >= 32 else { throw AuthConfigurationError("STORELEDGER_JWT_HS256_SECRET_FILES: \(path) holds fewer than 32 bytes") }
            keys.append(.hs256(secret: secret, kid: nil))
        }
        for path in files("STORELEDGER_JWT_PUBLIC_KEY_FILES") {
            let text = String(decoding: try read(path, "STORELEDGER_JWT_PUBLIC_KEY_FILES"), as: UTF8.self)
            do { keys.append(try JWTKeySource.pem(text)) } catch { throw AuthConfigurationError("STORELEDGER_JWT_PUBLIC_KEY_FILES: \(path): \(error)") }
        }
        if let path = value("STORELEDGER_JWT_JWKS_FILE") {
            do {
                let loaded = try JWTKeySource.jwks(try read(path, "STORELEDGER_JWT_JWKS_FILE"))
                guard !loaded.isEmpty else { throw AuthConfigurationError("no ES256 or RS256 signing key in it") }
                keys += loaded
            } catch { throw AuthConfigurationError("STORELEDGER_JWT_JWKS_FILE: \(path): \(error)") }
        }
        var jwt: JWTVerifier?
        if !keys.isEmpty {
            guard let issuer = value("STORELEDGER_JWT_ISSUER"), let audience = value("STORELEDGER_JWT_AUDIENCE") else {
                throw AuthConfigurationError("end-user token keys are configured: set STORELEDGER_JWT_ISSUER and STORELEDGER_JWT_AUDIENCE too")
            }
            let leeway = value("STORELEDGER_JWT_LEEWAY_S").map { Int64($0) } ?? 60
            guard let leeway, (0...300).contains(leeway) else { throw AuthConfigurationError("STORELEDGER_JWT_LEEWAY_S must be 0...300") }
            jwt = JWTVerifier(keys: keys, issuer: issuer, audience: audience, userClaim: value("STORELEDGER_JWT_USER_CLAIM") ?? "sub",
                              leewaySeconds: leeway)
        }
        return AuthConfiguration(authenticator: Authenticator(apiKeys: APIKeyRing(entries: service + admin), jwt: jwt))
    }

    /// Whether any client credential can authenticate at all (else every client route is 401).
    public var acceptsAnyCredential: Bool { !authenticator.apiKeys.entries.isEmpty || authenticator.jwt != nil }
}
