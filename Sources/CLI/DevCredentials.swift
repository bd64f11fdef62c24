import Auth
import Configuration
import Crypto
import Foundation
import Runtime

/// The credentials `storeledger dev` makes for one run, so the defaults stay strict and everything
/// works out of the box: a service API key, an admin (support) key, an HS256 secret for end-user
/// tokens, a V1 shared secret and a throwaway App Store Connect issuer id for the signer's JWS
/// forms. Only hashes and file paths reach the processes' environment; the keys are printed once
/// for the developer and live no longer than the run (the secret file sits in dev's 0700 directory).
struct DevCredentials {
    static let jwtIssuer = "storeledger-dev"
    static let jwtAudience = "storeledger"
    static let demoUser = "dev-user-1"

    let apiKey: String
    let adminKey: String
    let jwtSecret: [UInt8]
    let jwtSecretFile: String
    let v1SharedSecret: String
    let issuerId: String

    /// Setting.devAPIKey, Setting.v1SharedSecrets and Setting.signingIssuerId, when set, are used instead of new ones
    /// (scripts and tests that start dev know their key in advance).
    /// - Parameter apiKey: the service key to use (the simulator presents its own).
    static func create(directory: String, environment: [String: String], apiKey: String? = nil) throws -> DevCredentials {
        let given = ConfigurationReader(environment: Environment.variables)
        let secret = try SecureRandom.bytes(count: 32)
        let file = directory + "/jwt-hs256.secret"
        let encoded = Base64URL.encode(secret)
        try PrivateFile.write(Array(encoded.utf8), to: file)
        let v1 = environment[Setting.v1SharedSecrets.name] ?? given.raw(.v1SharedSecrets)
        let generatedKey = try APIKeyRing.generateKey(prefix: "slk_dev")
        let generatedV1 = "dev-v1-" + Base64URL.encode(try SecureRandom.bytes(count: 12))
        return DevCredentials(
            apiKey: apiKey ?? given.raw(.devAPIKey) ?? generatedKey,
            adminKey: try APIKeyRing.generateKey(prefix: "sla_dev"),
            jwtSecret: Array(encoded.utf8), jwtSecretFile: file,
            v1SharedSecret: v1 ?? generatedV1,
            issuerId: environment[Setting.signingIssuerId.name] ?? given.raw(.signingIssuerId) ?? UUID().uuidString.lowercased())
    }

    /// What ingest and the workers are started with: hashes, paths and names, never a key.
    var environment: [String: String] {
        [Setting.apiKeys.name: "dev=\(APIKeyRing.hash(apiKey))",
         Setting.adminKeys.name: "dev-support=\(APIKeyRing.hash(adminKey))",
         Setting.jwtHS256SecretFiles.name: jwtSecretFile,
         Setting.jwtIssuer.name: Self.jwtIssuer, Setting.jwtAudience.name: Self.jwtAudience,
         Setting.v1SharedSecrets.name: v1SharedSecret]
    }

    /// A day-long token for `user`, as the company's login service would issue it.
    func userToken(_ user: String = DevCredentials.demoUser) -> String {
        JWTMinter.hs256(secret: jwtSecret, issuer: Self.jwtIssuer, audience: Self.jwtAudience, subject: user, lifetime: 86_400)
    }

    /// `NAME=value` lines a developer can paste into a shell.
    var lines: [String] {
        ["API_KEY=\(apiKey)", "ADMIN_KEY=\(adminKey)", "USER_TOKEN=\(userToken())", "USER=\(Self.demoUser)",
         "V1_SHARED_SECRET=\(v1SharedSecret)", "SIGNER_ISSUER_ID=\(issuerId)"]
    }

    func usage(_ ingest: String) -> [String] {
        [
            "",
            "Dev credentials (new each run; docs/security.md explains each kind):",
            "  service API key  \(apiKey)",
            "      curl -H 'Authorization: Bearer \(apiKey)' \(ingest)/v1/users/\(Self.demoUser)/membership",
            "  user token       for \(Self.demoUser), 24 h (HS256, iss \(Self.jwtIssuer), aud \(Self.jwtAudience)); acts for that user only",
            "      curl -H \"Authorization: Bearer $USER_TOKEN\" \(ingest)/v1/users/\(Self.demoUser)/offers",
            "  admin key        \(adminKey)",
            "      curl -H 'Authorization: Bearer \(adminKey)' \(ingest)/v1/admin/users/\(Self.demoUser)",
            "  V1 shared secret \(v1SharedSecret)  (Apple's V1 notifications must carry it as password)",
            "  signer issuer id \(issuerId)  (throwaway: dev signs legacy and JWS offers)",
        ]
    }
}
