import CivilCalendar
import Domain

/// Apple's `offerPeriod`: an ISO 8601 duration of whole years, months, weeks and days (`P1W`, `P3M`,
/// `P1Y`, `P1Y6M`), added to an instant in UTC calendar time as Apple bills: a month later is the same
/// day of the next month, or its last day when that month is shorter. Anything else (a time part,
/// fractions, a number over four digits, an empty duration) reads as unknown: nil.
enum OfferPeriod {
    static func endMs(adding period: String, to startMs: Int64) -> Int64? {
        guard let (months, days) = parse(period) else { return nil }
        let day = startMs.floorDivided(by: CivilDate.dayMs)
        let (year, month, dayOfMonth) = CivilDate.date(days: day)
        let monthIndex = year * 12 + (month - 1) + months
        let (newYear, newMonth) = (monthIndex.floorDivided(by: 12), monthIndex.floorModulo(12) + 1)
        let monthStart = CivilDate.days(year: newYear, month: newMonth, day: 1)
        let nextMonthStart = CivilDate.days(year: newMonth == 12 ? newYear + 1 : newYear, month: newMonth == 12 ? 1 : newMonth + 1, day: 1)
        let landed = monthStart + min(dayOfMonth, nextMonthStart - monthStart) - 1 + days
        return landed.saturatingMultiplied(by: CivilDate.dayMs).saturatingAdding(startMs.floorModulo(CivilDate.dayMs))
    }

    /// (months, days) of a `PnYnMnWnD` duration, each part at most four digits, in that order.
    static func parse(_ text: String) -> (months: Int64, days: Int64)? {
        var bytes = Substring(text).utf8.makeIterator()
        guard bytes.next() == UInt8(ascii: "P") else { return nil }
        var months: Int64 = 0, days: Int64 = 0
        var number: Int64 = 0, digits = 0, parts = 0
        var order = 0   // Y 1, M 2, W 3, D 4: each at most once, in this order
        while let byte = bytes.next() {
            if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                guard digits < 4 else { return nil }
                number = number * 10 + Int64(byte - UInt8(ascii: "0"))
                digits += 1
                continue
            }
            let rank: Int
            switch byte {
            case UInt8(ascii: "Y"): rank = 1; months += number * 12
            case UInt8(ascii: "M"): rank = 2; months += number
            case UInt8(ascii: "W"): rank = 3; days += number * 7
            case UInt8(ascii: "D"): rank = 4; days += number
            default: return nil
            }
            guard digits > 0, rank > order else { return nil }
            order = rank
            number = 0
            digits = 0
            parts += 1
        }
        guard digits == 0, parts > 0, months + days > 0 else { return nil }
        return (months, days)
    }
}
