/// Why signed data was refused, named exactly as Apple's `SignedDataVerifier` names it
/// (app-store-server-library `VerificationStatus`), so a dead letter or a CLI verdict reads the
/// same as Apple's own libraries would.
public enum VerificationStatus: String, Sendable, Codable, CaseIterable {
    case verificationFailure = "VERIFICATION_FAILURE"
    case invalidAppIdentifier = "INVALID_APP_IDENTIFIER"
    case invalidCertificate = "INVALID_CERTIFICATE"
    case invalidChainLength = "INVALID_CHAIN_LENGTH"
    case invalidChain = "INVALID_CHAIN"
    case invalidEnvironment = "INVALID_ENVIRONMENT"
    /// Only with online (OCSP) checks, which this verifier does not make; kept for completeness.
    case retryableVerificationFailure = "RETRYABLE_VERIFICATION_FAILURE"

    /// Worth trying again later: Apple reserves this for an OCSP responder that did not answer.
    public var isRetryable: Bool { self == .retryableVerificationFailure }
}

/// A refused JWS: Apple's status plus our explanation (never the token itself).
public struct JWSVerificationFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var status: VerificationStatus
    public var reason: String

    public init(_ status: VerificationStatus, _ reason: String) {
        self.status = status
        self.reason = reason
    }

    public var description: String { "\(status.rawValue): \(reason)" }
}
