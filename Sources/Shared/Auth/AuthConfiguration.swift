import Configuration
import Foundation

/// Client authentication settings from the environment, validated in one place
/// (docs/security.md lists each variable):
/// - Setting.apiKeys, Setting.adminKeys: `name=<hex SHA-256 of the key>,...`
/// - Setting.jwtIssuer, Setting.jwtAudience (both required once any JWT key is set),
///   Setting.jwtUserClaim (default `sub`), Setting.jwtLeewaySeconds (default 0, at most 300)
/// - keys: Setting.jwtJWKSFile, Setting.jwtPublicKeyFiles (comma-separated PEM files),
///   Setting.jwtHS256SecretFiles (comma-separated files, each one secret of 32+ bytes;
///   files, so a secret never sits in the process environment or a command line)
public struct AuthConfiguration: Sendable {
    public var authenticator: Authenticator

    public init(authenticator: Authenticator) { self.authenticator = authenticator }

    /// Loads the key files the settings name and checks them (`ClientAuthConfiguration`).
    public init(_ settings: ClientAuthConfiguration) throws(AuthConfigurationError) {
        func read(_ path: String, _ variable: String) throws(AuthConfigurationError) -> [UInt8] {
            guard let data = FileManager.default.contents(atPath: path) else { throw AuthConfigurationError("\(variable): cannot read \(path)") }
            return [UInt8](data)
        }
        let service = try APIKeyRing.parse(settings.apiKeys, role: .service, variable: Setting.apiKeys.name)
        let admin = try APIKeyRing.parse(settings.adminKeys, role: .admin, variable: Setting.adminKeys.name)
        if let clash = service.first(where: { s in admin.contains { $0.sha256 == s.sha256 } }) {
            throw AuthConfigurationError("key \(clash.name) is both a service and an admin key: give support a key of its own")
        }
        var keys: [JWTKey] = []
        for path in settings.jwtHS256SecretFiles {
            var secret = try read(path, Setting.jwtHS256SecretFiles.name)
            while let last = secret.last, last == 0x0A || last == 0x0D { secret.removeLast() }
            guard secret.count >= 32 else { throw AuthConfigurationError("\(Setting.jwtHS256SecretFiles): \(path) holds fewer than 32 bytes") }
            keys.append(.hs256(secret: secret, kid: nil))
        }
        for path in settings.jwtPublicKeyFiles {
            let text = String(decoding: try read(path, Setting.jwtPublicKeyFiles.name), as: UTF8.self)
            do { keys.append(try JWTKeySource.pem(text)) } catch { throw AuthConfigurationError("\(Setting.jwtPublicKeyFiles): \(path): \(error)") }
        }
        if let path = settings.jwtJWKSFile {
            do {
                let loaded = try JWTKeySource.jwks(try read(path, Setting.jwtJWKSFile.name))
                guard !loaded.isEmpty else { throw AuthConfigurationError("no ES256 or RS256 signing key in it") }
                keys += loaded
            } catch { throw AuthConfigurationError("\(Setting.jwtJWKSFile): \(path): \(error)") }
        }
        var jwt: JWTVerifier?
        if !keys.isEmpty {
            guard let issuer = settings.jwtIssuer, let audience = settings.jwtAudience else {
                throw AuthConfigurationError("end-user token keys are configured: set \(Setting.jwtIssuer) and \(Setting.jwtAudience) too")
            }
            // Bounds: Setting.jwtLeewaySeconds (0...300), checked by the reader.
            jwt = JWTVerifier(keys: keys, issuer: issuer, audience: audience, userClaim: settings.jwtUserClaim,
                              leewaySeconds: settings.jwtLeewaySeconds)
        }
        self.init(authenticator: Authenticator(apiKeys: APIKeyRing(entries: service + admin), jwt: jwt))
    }

    /// Whether any client credential can authenticate at all (else every client route is 401).
    public var acceptsAnyCredential: Bool { !authenticator.apiKeys.entries.isEmpty || authenticator.jwt != nil }
}
