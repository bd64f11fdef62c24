import Auth
import Crypto
import Foundation
import XCTest

/// Pure tests of client authentication: API keys by hash, end-user JWTs (HS256 with a secret,
/// ES256 from a JWKS and from PEM, RS256 from a JWKS with a key made by the openssl command),
/// the claim checks, algorithm confusion, and the rate limiter's arithmetic.
final class AuthTests: XCTestCase {
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    let secret = Array("0123456789abcdef0123456789abcdef-hs".utf8)

    private func verifier(_ keys: [JWTKey], leewaySeconds: Int64 = 60) -> JWTVerifier {
        JWTVerifier(keys: keys, issuer: "https://login.example", audience: "storeledger", leewaySeconds: leewaySeconds)
    }

    private func token(alg: String = "HS256", kid: String? = nil, claims: [String: Any], sign: (Data) throws -> [UInt8]) rethrows -> String {
        var header: [String: Any] = ["alg": alg, "typ": "JWT"]
        if let kid { header["kid"] = kid }
        let h = Base64URL.encode(try! JSONSerialization.data(withJSONObject: header, options: .sortedKeys))
        let p = Base64URL.encode(try! JSONSerialization.data(withJSONObject: claims, options: .sortedKeys))
        return "\(h).\(p).\(Base64URL.encode(try sign(Data("\(h).\(p)".utf8))))"
    }

    private func claims(_ changes: [String: Any] = [:]) -> [String: Any] {
        var claims: [String: Any] = ["iss": "https://login.example", "aud": "storeledger", "sub": "user-1",
                                     "exp": now.timeIntervalSince1970 + 300, "nbf": now.timeIntervalSince1970 - 10]
        claims.merge(changes) { $1 }
        return claims
    }

    func testAPIKeysMatchByHashOnlyAndRotate() throws {
        let old = try APIKeyRing.generateKey(), new = try APIKeyRing.generateKey(), support = try APIKeyRing.generateKey(prefix: "sla")
        XCTAssertTrue(old.hasPrefix("slk_"))
        XCTAssertNotEqual(old, new)
        let entries = try APIKeyRing.parse("backend=\(APIKeyRing.hash(old)), backend-next=sha256:\(APIKeyRing.hash(new))", role: .service, variable: "K")
            + APIKeyRing.parse("support=\(APIKeyRing.hash(support))", role: .admin, variable: "A")
        let ring = APIKeyRing(entries: entries)
        XCTAssertEqual(ring.match(old)?.name, "backend")
        XCTAssertEqual(ring.match(new)?.name, "backend-next")
        XCTAssertEqual(ring.match(support)?.role, .admin)
        XCTAssertNil(ring.match(old + "x"))
        XCTAssertNil(ring.match(""))
        XCTAssertNil(ring.match(String(repeating: "k", count: 10_000)), "an oversized key is refused unhashed")
        XCTAssertNil(ring.match(APIKeyRing.hash(old)), "the stored hash is not itself a key")
        XCTAssertThrowsError(try APIKeyRing.parse("backend=\(old)", role: .service, variable: "K"), "a plain key is not accepted as configuration")
        XCTAssertThrowsError(try APIKeyRing.parse("=\(APIKeyRing.hash(old))", role: .service, variable: "K"))
    }

    func testAuthenticatorSeparatesKindsAndRefusesMalformedHeaders() throws {
        let key = try APIKeyRing.generateKey(), admin = try APIKeyRing.generateKey()
        let auth = Authenticator(apiKeys: APIKeyRing(entries: [.init(name: "b", role: .service, sha256: SHA256.hash(Array(key.utf8))),
                                                               .init(name: "s", role: .admin, sha256: SHA256.hash(Array(admin.utf8)))]),
                                 jwt: verifier([.hs256(secret: secret, kid: nil)]))
        XCTAssertEqual(auth.authenticate(authorization: nil), .anonymous)
        XCTAssertEqual(auth.authenticate(authorization: "Bearer \(key)"), .authenticated(.service(keyName: "b")))
        XCTAssertEqual(auth.authenticate(authorization: "bearer  \(admin) "), .authenticated(.admin(keyName: "s")))
        let jwt = token(claims: claims()) { HMAC.sha256(key: secret, message: $0) }
        XCTAssertEqual(auth.authenticate(authorization: "Bearer \(jwt)", now: now), .authenticated(.user(id: "user-1")))
        for bad in ["Basic abc", "Bearer", "Bearer ", "Token \(key)", key] {
            guard case .refused(let failure) = auth.authenticate(authorization: bad) else { return XCTFail("\(bad) accepted") }
            XCTAssertFalse(failure.reason.contains(key), "a reason never repeats the credential")
        }
    }

    func testHS256ClaimsAreChecked() {
        let jwt = verifier([.hs256(secret: secret, kid: nil)])
        func check(_ changes: [String: Any], at time: Date? = nil) -> Result<String, AuthFailure> {
            jwt.verify(token(claims: claims(changes)) { HMAC.sha256(key: secret, message: $0) }, now: time ?? now)
        }
        XCTAssertEqual(try check([:]).get(), "user-1")
        XCTAssertEqual(try check(["aud": ["other", "storeledger"]]).get(), "user-1", "aud may be an array")
        XCTAssertEqual(check(["exp": now.timeIntervalSince1970 - 61]).failureReason, "token expired")
        XCTAssertNoThrow(try check(["exp": now.timeIntervalSince1970 - 30]).get(), "60 s leeway for clock skew")
        // Without leeway (the default), a token is refused the second it expires and before its nbf.
        let strict = verifier([.hs256(secret: secret, kid: nil)], leewaySeconds: 0)
        let sign: (Data) -> [UInt8] = { HMAC.sha256(key: self.secret, message: $0) }
        XCTAssertEqual(strict.verify(token(claims: claims(["exp": now.timeIntervalSince1970 - 1]), sign: sign), now: now).failureReason, "token expired")
        XCTAssertEqual(strict.verify(token(claims: claims(["exp": now.timeIntervalSince1970]), sign: sign), now: now).failureReason, "token expired")
        XCTAssertEqual(strict.verify(token(claims: claims(["nbf": now.timeIntervalSince1970 + 1]), sign: sign), now: now).failureReason,
                       "token is not valid yet (nbf)")
        XCTAssertEqual(try strict.verify(token(claims: claims(["exp": now.timeIntervalSince1970 + 1]), sign: sign), now: now).get(), "user-1")
        XCTAssertEqual(JWTVerifier(keys: [], issuer: "i", audience: "a").leewaySeconds, 0)
        XCTAssertEqual(check(["nbf": now.timeIntervalSince1970 + 120]).failureReason, "token is not valid yet (nbf)")
        XCTAssertEqual(check(["iss": "https://evil.example"]).failureReason, "token issuer is not the configured one")
        XCTAssertEqual(check(["aud": "someone-else"]).failureReason, "token audience does not include the configured one")
        XCTAssertEqual(check(["exp": "tomorrow"]).failureReason, "token has no numeric exp")
        XCTAssertEqual(check(["exp": 1e300]).failureReason, "token has no numeric exp")
        XCTAssertNotNil(check(["sub": 42]).failureReason)
        XCTAssertNotNil(check(["sub": "a/b"]).failureReason, "a user id that would escape a path")
        XCTAssertNotNil(check(["sub": String(repeating: "u", count: 129)]).failureReason)
        let wrongKey = token(claims: claims()) { HMAC.sha256(key: Array("another secret of thirty-two bytes!!".utf8), message: $0) }
        XCTAssertEqual(jwt.verify(wrongKey, now: now).failureReason, "token signature does not verify")
        let none = token(alg: "none", claims: claims()) { _ in [] }
        XCTAssertNotNil(jwt.verify(none, now: now).failureReason)
        XCTAssertNotNil(jwt.verify(String(repeating: "a.", count: 5000), now: now).failureReason)
        let deep = Base64URL.encode(Array((String(repeating: "[", count: 500) + String(repeating: "]", count: 500)).utf8))
        XCTAssertNotNil(jwt.verify("\(deep).\(deep).AA", now: now).failureReason)
    }

    func testES256FromJWKSAndPEMAndNoAlgorithmConfusion() throws {
        let key = try P256PrivateKey.generate()
        // The uncompressed point is the last 65 bytes of the P-256 SubjectPublicKeyInfo.
        let point = Array(key.publicKey.spkiDER.suffix(64))
        let jwks = #"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","use":"sig","x":"\#(Base64URL.encode(point.prefix(32)))","y":"\#(Base64URL.encode(point.suffix(32)))"},{"kty":"oct","k":"AAAA"}]}"#
        let keys = try JWTKeySource.jwks(Array(jwks.utf8))
        XCTAssertEqual(keys.count, 1, "the symmetric key in the set is skipped")
        let jwt = verifier(keys)
        let signed = try token(alg: "ES256", kid: "k1", claims: claims()) { try key.sign([UInt8]($0)).raw }
        XCTAssertEqual(try jwt.verify(signed, now: now).get(), "user-1")
        XCTAssertEqual(verifier(keys).verify(try token(alg: "ES256", kid: "k2", claims: claims()) { try key.sign([UInt8]($0)).raw }, now: now)
            .failureReason, "no configured key verifies ES256 tokens with this kid")
        let other = try P256PrivateKey.generate()
        XCTAssertEqual(jwt.verify(try token(alg: "ES256", kid: "k1", claims: claims()) { try other.sign([UInt8]($0)).raw }, now: now).failureReason,
                       "token signature does not verify")
        // HS256 "signed" with the public key's bytes must not verify against the public key.
        let confused = token(alg: "HS256", claims: claims()) { HMAC.sha256(key: key.publicKey.spkiDER, message: $0) }
        XCTAssertNotNil(jwt.verify(confused, now: now).failureReason)

        let pemKey = try JWTKeySource.pem(pemOf(key.publicKey.spkiDER))
        XCTAssertEqual(try verifier([pemKey]).verify(signed, now: now).get(), "user-1", "the same key from a PEM file")
    }

    func testRS256FromJWKSWithAnOpenSSLKey() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rs256-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let keyPath = directory.appendingPathComponent("key.pem").path
        try openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", keyPath])
        let modulusHex = String(decoding: try openssl(["rsa", "-in", keyPath, "-noout", "-modulus"]), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines).replacingOccurrences(of: "Modulus=", with: "")
        let modulus = stride(from: 0, to: modulusHex.count, by: 2).map { i -> UInt8 in
            let start = modulusHex.index(modulusHex.startIndex, offsetBy: i)
            return UInt8(modulusHex[start..<modulusHex.index(start, offsetBy: 2)], radix: 16)!
        }
        let jwks = #"{"keys":[{"kty":"RSA","kid":"r1","n":"\#(Base64URL.encode(modulus))","e":"AQAB"}]}"#
        let jwt = verifier(try JWTKeySource.jwks(Array(jwks.utf8)))
        let signed = try token(alg: "RS256", kid: "r1", claims: claims()) { input in
            let inputPath = directory.appendingPathComponent("input").path
            try input.write(to: URL(fileURLWithPath: inputPath))
            return try openssl(["dgst", "-sha256", "-sign", keyPath, inputPath])
        }
        XCTAssertEqual(try jwt.verify(signed, now: now).get(), "user-1")
        var parts = signed.split(separator: ".").map(String.init)
        parts[1] = Base64URL.encode(Array(#"{"iss":"https://login.example","aud":"storeledger","sub":"admin","exp":9999999999}"#.utf8))
        XCTAssertEqual(jwt.verify(parts.joined(separator: "."), now: now).failureReason, "token signature does not verify")
    }

    func testRateLimiterRefillsAndSaysWhenToRetry() {
        let limiter = RateLimiter(maxKeys: 4)
        let limit = RateLimiter.Limit(ratePerSecond: 2, burst: 4)
        let start = ContinuousClock.now
        XCTAssertEqual((0..<4).compactMap { _ in limiter.take("a", limit, now: start) }, [], "the burst is allowed")
        XCTAssertEqual(limiter.take("a", limit, now: start), 1, "then Retry-After: 1")
        XCTAssertNil(limiter.take("b", limit, now: start), "buckets are per credential")
        XCTAssertNil(limiter.take("a", limit, now: start + .milliseconds(600)), "a token is back after 1/rate")
        XCTAssertEqual(RateLimiter().take("slow", .init(ratePerSecond: 0.1, burst: 1), now: start), nil)
        let slow = RateLimiter()
        _ = slow.take("s", .init(ratePerSecond: 0.1, burst: 1), now: start)
        XCTAssertEqual(slow.take("s", .init(ratePerSecond: 0.1, burst: 1), now: start), 10)
        for index in 0..<100 { _ = limiter.take("k\(index)", limit, now: start) }
        XCTAssertEqual(limiter.take("k99", limit, now: start), nil, "memory stays bounded; the newest bucket is kept")
    }

    @discardableResult
    private func openssl(_ arguments: [String]) throws -> [UInt8] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw XCTSkip("openssl \(arguments[0]) failed") }
        return [UInt8](data)
    }

    private func pemOf(_ spki: [UInt8]) -> String {
        let base64 = Data(spki).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed])
        return "-----BEGIN PUBLIC KEY-----\n\(base64)\n-----END PUBLIC KEY-----\n"
    }
}

extension Result where Failure == AuthFailure {
    var failureReason: String? {
        if case .failure(let failure) = self { return failure.reason }
        return nil
    }
}
