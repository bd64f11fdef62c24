import Foundation
import Synchronization

/// The version of the code that runs, named in what it writes for the record (a replay's
/// compensating ledger entries say which code corrected them, issue 13). A constant bumped with
/// each change of pipeline behaviour; a deployment that builds from git may set
/// `Setting.codeVersion` (e.g. to `git describe --always --dirty`) to be more precise.
public enum CodeVersion {
    public static let built = "storeledger-2026.12.1"

    private static let configured = Mutex<String?>(nil)

    public static var current: String { configured.withLock { $0 } ?? built }

    /// Set once at process start (`ProcessSetup`); `nil` keeps the built-in version.
    public static func configure(_ version: String?) { configured.withLock { $0 = version } }
}
