/// Proleptic Gregorian calendar arithmetic on day numbers (day 0 = 1970-01-01), after
/// Howard Hinnant's `days_from_civil` / `civil_from_days`. One copy for every module that
/// reads or writes calendar dates (receipts, certificates, PostgreSQL text, reasons, the
/// simulator's Apple-shaped dates): no formatter, no locale, no time-zone database.
public enum CivilDate {
    /// A UTC day in milliseconds (no leap seconds: Unix time).
    public static let dayMs: Int64 = 86_400_000

    /// Days since 1970-01-01 of a calendar date; `month` 1...12, `day` 1...31. Correct for
    /// any year whose day count fits Int64 (callers bound their inputs first).
    public static func days(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The calendar date of a day number (astronomical years: 0 is 1 BC).
    public static func date(days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
