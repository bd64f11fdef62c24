import AppleDecoding
import Configuration
import Crypto
import Domain
import Foundation
import FuzzDriver

/// libFuzzer target: the whole router on raw bodies, as ingest writes them: V1 JSON (both shapes),
/// V2 `{"signedPayload"}` bodies, and receipt uploads `{"user_id", "receipt_data"}`.
func fuzzOne(_ bytes: [UInt8]) {
    _ = FuzzSetup.decoder.decode(RawInput(source: .appStoreNotification, body: bytes, receivedAtMs: 0, position: nil))
    _ = FuzzSetup.decoder.decode(RawInput(source: .appReceipt, body: bytes, receivedAtMs: 0, position: nil))
}

enum FuzzSetup {
    static let decoder: AppleInputDecoder = {
        var config = FuzzDriver.decodingConfiguration()
        config.v1SharedSecrets = ["dummy_shared_secret"]
        return try! config.makeDecoder()
    }()
}

/// libFuzzer's driver or a replay of saved inputs (`FuzzDriver.run`).
@main
struct Entry {
    static func main() { FuzzDriver.run(fuzzOne) }
}
