import XCTest
final class DomainTestsPlaceholder: XCTestCase { func testBuilds() { XCTAssertTrue(true) } }
