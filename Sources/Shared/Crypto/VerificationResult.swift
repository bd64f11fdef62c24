/// The outcome of a signature or chain check: an expected failure is a value, not an error.
public enum VerificationResult<Verified: Sendable>: Sendable {
    case valid(Verified)
    /// `reason` is OpenSSL's verification error text (no secrets, no input bytes).
    case invalid(reason: String)

    public var isValid: Bool {
        if case .valid = self { return true }
        return false
    }

    public var verified: Verified? {
        if case .valid(let value) = self { return value }
        return nil
    }

    public var failureReason: String? {
        if case .invalid(let reason) = self { return reason }
        return nil
    }
}

extension VerificationResult: Equatable where Verified: Equatable {}
