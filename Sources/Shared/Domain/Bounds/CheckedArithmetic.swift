/// Arithmetic on values that came from outside (STYLE.md practice 12). Each stage rejects dates,
/// quantities and catalog numbers beyond `EventBounds` where a record enters it, so in practice these
/// never reach the type's limits; pinning at the limits instead of trapping keeps a record that slipped
/// past a check from crashing a worker in a loop (a trap on redelivery is a crash loop).
extension FixedWidthInteger where Self: SignedInteger {
    /// `self + other`, pinned at `min`/`max` instead of trapping.
    public func saturatingAdding(_ other: Self) -> Self {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }

    /// `self - other`, pinned at `min`/`max` instead of trapping.
    public func saturatingSubtracting(_ other: Self) -> Self {
        let (difference, overflow) = subtractingReportingOverflow(other)
        guard overflow else { return difference }
        return other < 0 ? .max : .min
    }

    /// `self * other`, pinned at `min`/`max` instead of trapping.
    public func saturatingMultiplied(by other: Self) -> Self {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        guard overflow else { return product }
        return (self < 0) == (other < 0) ? .max : .min
    }

    /// `|self - other|` without overflow: the true distance of two signed values always fits the
    /// unsigned type of the same width.
    public func distanceMagnitude(to other: Self) -> Magnitude {
        self >= other ? Magnitude(truncatingIfNeeded: self &- other) : Magnitude(truncatingIfNeeded: other &- self)
    }

    /// Floor division by a positive divisor (towards the earlier instant for dates before 1970),
    /// defined for every value including `min`.
    public func floorDivided(by divisor: Self) -> Self {
        precondition(divisor > 0, "floor division by a positive constant only")
        let (quotient, remainder) = quotientAndRemainder(dividingBy: divisor)
        return remainder < 0 ? quotient - 1 : quotient
    }

    /// The non-negative remainder that goes with `floorDivided(by:)`.
    public func floorModulo(_ divisor: Self) -> Self {
        precondition(divisor > 0, "floor modulo by a positive constant only")
        let remainder = self % divisor
        return remainder < 0 ? remainder + divisor : remainder
    }
}
