import XCTest
final class SignerTestsPlaceholder: XCTestCase { func testBuilds() { XCTAssertTrue(true) } }
