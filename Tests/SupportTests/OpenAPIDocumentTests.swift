@testable import Ingest
import Foundation
import XCTest

/// The served description must stay parseable JSON whatever is spliced into it (setting names are
/// interpolated into a raw string literal, where a plain `\(...)` would stay text and break the JSON).
final class OpenAPIDocumentTests: XCTestCase {
    func testTheDocumentIsJSONAndNamesTheRealSettings() throws {
        let document = try XCTUnwrap(try JSONSerialization.jsonObject(with: OpenAPIDocument.json) as? [String: Any])
        XCTAssertEqual(document["openapi"] as? String, "3.1.0")
        XCTAssertFalse(OpenAPIDocument.text.contains(#"\("#), "an interpolation left as text")
        XCTAssertTrue(OpenAPIDocument.text.contains("STORELEDGER_ADMIN_KEYS"))
        XCTAssertTrue(OpenAPIDocument.text.contains("STORELEDGER_METRICS_ACCESS=admin"))
    }
}
