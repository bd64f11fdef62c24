import CivilCalendar
import Foundation
import XCTest

final class CivilDateTests: XCTestCase {
    func testKnownDays() {
        XCTAssertEqual(CivilDate.days(year: 1970, month: 1, day: 1), 0)
        XCTAssertEqual(CivilDate.days(year: 1969, month: 12, day: 31), -1)
        XCTAssertEqual(CivilDate.days(year: 2000, month: 3, day: 1), 11_017)
        XCTAssertEqual(CivilDate.days(year: 2024, month: 2, day: 29), 19_782)
        XCTAssertEqual(CivilDate.days(year: 0, month: 3, day: 1), -719_468)
    }

    func testRoundTripAndAgreementWithFoundation() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        var previous: (Int64, Int64, Int64)?
        for days in stride(from: Int64(-800_000), through: 800_000, by: 997) {
            let date = CivilDate.date(days: days)
            XCTAssertEqual(CivilDate.days(year: date.year, month: date.month, day: date.day), days)
            XCTAssert((1...12).contains(date.month) && (1...31).contains(date.day))
            if let previous { XCTAssert((date.year, date.month, date.day) > previous) }
            previous = (date.year, date.month, date.day)
            // Foundation switches to Julian before 1582; compare where both are Gregorian.
            if date.year >= 1600 {
                let parts = calendar.dateComponents([.year, .month, .day], from: Date(timeIntervalSince1970: Double(days) * 86_400))
                XCTAssertEqual([Int64(parts.year!), Int64(parts.month!), Int64(parts.day!)], [date.year, date.month, date.day], "day \(days)")
            }
        }
    }
}
