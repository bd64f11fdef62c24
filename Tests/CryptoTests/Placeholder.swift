import XCTest
final class CryptoTestsPlaceholder: XCTestCase { func testBuilds() { XCTAssertTrue(true) } }
