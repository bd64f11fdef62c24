@testable import Ingest
import XCTest

/// The places for work waiting on PostgreSQL are shared by the read API and the offer signature's
/// read: once they are taken, more work is refused at once, and a place freed is taken again.
final class BoundedReadsTests: XCTestCase {
    func testEnterRefusesBeyondTheBoundUntilAPlaceIsLeft() {
        let bounded = BoundedReads(timeout: .seconds(5), maxInFlight: 2)
        XCTAssertTrue(bounded.enter())
        XCTAssertTrue(bounded.enter())
        XCTAssertFalse(bounded.enter(), "a third waiter is refused")
        XCTAssertFalse(bounded.enter(), "a refusal does not hold a place")
        bounded.leave()
        XCTAssertTrue(bounded.enter())
        XCTAssertFalse(bounded.enter())
    }
}
