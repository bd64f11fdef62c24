import Foundation

/// The version of the code that runs, named in what it writes for the record (a replay's
/// compensating ledger entries say which code corrected them, issue 13). A constant bumped with
/// each change of pipeline behaviour; a deployment that builds from git may set
/// `STORELEDGER_CODE_VERSION` (e.g. to `git describe --always --dirty`) to be more precise.
public enum CodeVersion {
    public static let built = "storeledger-2026.12.1"

    public static var current: String {
        guard let text = getenv("STORELEDGER_CODE_VERSION").map({ String(cString: $0) }), !text.isEmpty, text.utf8.count <= 100 else {
            return built
        }
        return text
    }
}
