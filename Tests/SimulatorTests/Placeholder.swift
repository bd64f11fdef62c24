import XCTest
final class SimulatorTestsPlaceholder: XCTestCase { func testBuilds() { XCTAssertTrue(true) } }
