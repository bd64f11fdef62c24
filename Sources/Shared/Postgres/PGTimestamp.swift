import Foundation
import CivilCalendar

/// timestamptz text in and out, by plain calendar arithmetic (no formatter, no time zone
/// database): sessions run with `DateStyle=ISO` and `TimeZone=UTC`, but any ISO offset parses.
enum PGTimestamp {
    /// `2024-05-01 12:34:56.789012+00` (UTC, rounded to the microsecond; BC years as PostgreSQL writes them).
    static func format(_ date: Date) -> String {
        let micros = Int64((date.timeIntervalSince1970 * 1_000_000).rounded())
        let (days, microOfDay) = floorDivMod(micros, 86_400_000_000)
        let (year, month, day) = CivilDate.date(days: days)
        let seconds = microOfDay / 1_000_000
        let fraction = microOfDay % 1_000_000
        var text = pad(year > 0 ? year : 1 - year, 4) + "-" + pad(month, 2) + "-" + pad(day, 2)
        text += " " + pad(seconds / 3600, 2) + ":" + pad(seconds / 60 % 60, 2) + ":" + pad(seconds % 60, 2)
        if fraction != 0 { text += "." + pad(fraction, 6) }
        text += "+00"
        if year <= 0 { text += " BC" }
        return text
    }

    /// Parses PostgreSQL's ISO output for timestamptz (and timestamp, read as UTC):
    /// `YYYY-MM-DD HH:MM:SS[.ffffff][+HH[:MM[:SS]]][ BC]`, plus `infinity`/`-infinity`.
    static func parse(_ text: String) -> Date? {
        if text == "infinity" { return .distantFuture }
        if text == "-infinity" { return .distantPast }
        var scanner = ByteScanner(Array(text.utf8))
        guard let year = scanner.number(minDigits: 4), scanner.skip("-"),
              let month = scanner.number(digits: 2), scanner.skip("-"),
              let day = scanner.number(digits: 2), scanner.skip(" ") || scanner.skip("T"),
              let hour = scanner.number(digits: 2), scanner.skip(":"),
              let minute = scanner.number(digits: 2), scanner.skip(":"),
              let second = scanner.number(digits: 2),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var micros: Int64 = 0
        if scanner.skip(".") {
            guard let (fraction, digits) = scanner.fraction(), digits <= 6 else { return nil }
            micros = fraction * pow10(6 - digits)
        }
        var offsetSeconds: Int64 = 0
        if let sign = scanner.sign() {
            guard let hours = scanner.number(digits: 2) else { return nil }
            var offset = hours * 3600
            if scanner.skip(":") {
                guard let minutes = scanner.number(digits: 2) else { return nil }
                offset += minutes * 60
                if scanner.skip(":") {
                    guard let seconds = scanner.number(digits: 2) else { return nil }
                    offset += seconds
                }
            }
            offsetSeconds = sign * offset
        }
        let isBC = scanner.skip(" BC")
        guard scanner.atEnd else { return nil }
        let astronomicalYear = isBC ? 1 - year : year
        let days = CivilDate.days(year: astronomicalYear, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetSeconds
        // Integer microseconds divided once: the nearest Double to the exact decimal value.
        return Date(timeIntervalSince1970: Double(seconds * 1_000_000 + micros) / 1_000_000)
    }

    private static func floorDivMod(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        let quotient = a / b
        let remainder = a % b
        return remainder < 0 ? (quotient - 1, remainder + b) : (quotient, remainder)
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(value)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    private static func pow10(_ exponent: Int) -> Int64 {
        var result: Int64 = 1
        for _ in 0..<exponent { result *= 10 }
        return result
    }
}

/// A tiny cursor over ASCII bytes for the fixed formats PostgreSQL prints.
struct ByteScanner {
    private let bytes: [UInt8]
    private var position = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var atEnd: Bool { position == bytes.count }

    mutating func skip(_ literal: String) -> Bool {
        let expected = Array(literal.utf8)
        guard bytes.count - position >= expected.count,
              Array(bytes[position..<position + expected.count]) == expected else { return false }
        position += expected.count
        return true
    }

    /// Exactly `digits` decimal digits.
    mutating func number(digits: Int) -> Int64? {
        let start = position
        guard let value = number(minDigits: digits), position - start == digits else { return nil }
        return value
    }

    /// At least `minDigits` decimal digits (at most 18, so it cannot overflow).
    mutating func number(minDigits: Int) -> Int64? {
        guard let (value, count) = fraction(), count >= minDigits, count <= 18 else { return nil }
        return value
    }

    /// A run of digits and how many there were.
    mutating func fraction() -> (Int64, Int)? {
        var value: Int64 = 0
        var count = 0
        while position < bytes.count, bytes[position] >= 0x30, bytes[position] <= 0x39, count < 18 {
            value = value * 10 + Int64(bytes[position] - 0x30)
            position += 1
            count += 1
        }
        return count > 0 ? (value, count) : nil
    }

    /// `+` -> 1, `-` -> -1, anything else -> nil (not consumed).
    mutating func sign() -> Int64? {
        guard position < bytes.count else { return nil }
        switch bytes[position] {
        case UInt8(ascii: "+"): position += 1; return 1
        case UInt8(ascii: "-"): position += 1; return -1
        default: return nil
        }
    }
}
