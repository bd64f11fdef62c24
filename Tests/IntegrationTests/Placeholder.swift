import XCTest
final class IntegrationTestsPlaceholder: XCTestCase { func testBuilds() { XCTAssertTrue(true) } }
