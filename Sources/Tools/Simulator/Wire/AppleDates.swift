import CivilCalendar
/// Apple's date spellings, formatted without Foundation's DateFormatter (too slow for a
/// population of 100,000 users): V1 JSON `"2020-06-27 00:02:39 Etc/GMT"` and its `_pst` twin
/// `"2020-06-26 17:02:39 America/Los_Angeles"`, and receipt IA5 dates `"2020-06-27T00:02:39Z"`.
enum AppleDates {
    /// `yyyy-MM-dd HH:mm:ss Etc/GMT`.
    static func gmt(_ ms: Int64) -> String { civil(seconds: floorSeconds(ms), separator: " ") + " Etc/GMT" }

    /// `yyyy-MM-dd HH:mm:ss America/Los_Angeles` (US Pacific, with daylight saving time).
    static func pst(_ ms: Int64) -> String {
        let seconds = floorSeconds(ms)
        return civil(seconds: seconds + pacificOffset(utcSeconds: seconds), separator: " ") + " America/Los_Angeles"
    }

    /// RFC 3339 at second precision, as receipts carry dates (the milliseconds are lost, S14).
    static func rfc3339(_ ms: Int64) -> String { civil(seconds: floorSeconds(ms), separator: "T") + "Z" }

    /// Readable form for journeys and reports: `2025-03-01 12:00:05.123`.
    static func readable(_ ms: Int64) -> String {
        let milli = ((ms % 1000) + 1000) % 1000
        return civil(seconds: floorSeconds(ms), separator: " ") + "." + pad(Int(milli), 3)
    }

    static func floorSeconds(_ ms: Int64) -> Int64 { ms >= 0 ? ms / 1000 : (ms - 999) / 1000 }

    private static func civil(seconds: Int64, separator: String) -> String {
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let rest = Int(seconds - days * 86_400)
        let (year, month, day) = CivilDate.date(days: days)
        return "\(pad(Int(year), 4))-\(pad(Int(month), 2))-\(pad(Int(day), 2))\(separator)\(pad(rest / 3600, 2)):\(pad(rest / 60 % 60, 2)):\(pad(rest % 60, 2))"
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }

    /// -8 h, or -7 h between the second Sunday of March 10:00 UTC and the first Sunday of
    /// November 09:00 UTC (2:00 local), the US rule since 2007.
    static func pacificOffset(utcSeconds: Int64) -> Int64 {
        let days = Int(utcSeconds >= 0 ? utcSeconds / 86_400 : (utcSeconds - 86_399) / 86_400)
        let year = CivilDate.date(days: Int64(days)).year
        func nthSunday(_ month: Int, _ n: Int) -> Int {
            let first = Int(CivilDate.days(year: year, month: Int64(month), day: 1))
            let weekday = (first + 4) % 7  // 1970-01-01 was a Thursday (4); 0 = Sunday
            let firstSunday = first + (7 - ((weekday + 7) % 7)) % 7
            return firstSunday + (n - 1) * 7
        }
        let start = Int64(nthSunday(3, 2)) * 86_400 + 10 * 3600
        let end = Int64(nthSunday(11, 1)) * 86_400 + 9 * 3600
        return (utcSeconds >= start && utcSeconds < end) ? -7 * 3600 : -8 * 3600
    }
}
