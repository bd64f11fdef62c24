import Foundation
import Stages
import XCTest

/// Contract: the webhooks file is validated whole at start (every problem at once), the signing
/// secret never appears in an error, and `concurrency` defaults to 8 within 1...32.
final class WebhookConfigTests: XCTestCase {
    private func load(_ json: String, environment: [String: String] = ["CRM_SECRET": "crm-secret-0123456789abcdef"]) throws -> WebhookConfig {
        let path = NSTemporaryDirectory() + "webhooks-\(UUID().uuidString).json"
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(json.utf8)))
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try WebhookConfig.load(path: path, environment: environment)
    }

    func testConcurrencyDefaultsToEightAndIsBounded() throws {
        let config = try load("""
            {"endpoints": [{"id": "crm", "url": "https://crm.example/hooks", "secretEnv": "CRM_SECRET"},
                           {"id": "erp", "url": "https://erp.example/hooks", "secretEnv": "CRM_SECRET", "concurrency": 1},
                           {"id": "bi", "url": "https://bi.example/hooks", "secretEnv": "CRM_SECRET", "concurrency": 32}]}
            """)
        XCTAssertEqual(config.endpoints.map(\.concurrency), [8, 1, 32])

        XCTAssertThrowsError(try load("""
            {"endpoints": [{"id": "crm", "url": "https://crm.example/hooks", "secretEnv": "CRM_SECRET", "concurrency": 0},
                           {"id": "erp", "url": "https://erp.example/hooks", "secretEnv": "CRM_SECRET", "concurrency": 33}]}
            """)) { error in
            let text = String(describing: error)
            XCTAssertTrue(text.contains("endpoint crm: concurrency must be 1...32"), text)
            XCTAssertTrue(text.contains("endpoint erp: concurrency must be 1...32"), "every problem at once: \(text)")
            XCTAssertFalse(text.contains("crm-secret"), "the secret is never shown")
        }
    }
}
