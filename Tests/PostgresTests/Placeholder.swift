import XCTest
final class PostgresTestsPlaceholder: XCTestCase { func testBuilds() { XCTAssertTrue(true) } }
