import XCTest
final class DecodingTestsPlaceholder: XCTestCase { func testBuilds() { XCTAssertTrue(true) } }
