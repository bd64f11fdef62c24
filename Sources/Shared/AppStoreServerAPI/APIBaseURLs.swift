import AppleDecoding
import Foundation

/// Where the App Store Server API lives, per environment, as Apple's app-store-server-library
/// spells it. Xcode data has no server to ask (Apple's library refuses that environment too).
/// https://developer.apple.com/documentation/appstoreserverapi
public struct APIBaseURLs: Sendable, Equatable {
    public static let appleProduction = URL(string: "https://api.storekit.apple.com")!
    public static let appleSandbox = URL(string: "https://api.storekit-sandbox.apple.com")!
    public static let appleLocalTesting = URL(string: "https://local-testing-base-url")!
    public static let apple = APIBaseURLs(production: appleProduction, sandbox: appleSandbox, localTesting: appleLocalTesting)

    public var production: URL
    public var sandbox: URL
    public var localTesting: URL

    public init(production: URL, sandbox: URL, localTesting: URL = APIBaseURLs.appleLocalTesting) {
        self.production = production
        self.sandbox = sandbox
        self.localTesting = localTesting
    }

    /// nil for Xcode: there is no server API for StoreKit testing in Xcode.
    public func url(for environment: AppStoreEnvironment) -> URL? {
        switch environment {
        case .production: production
        case .sandbox: sandbox
        case .localTesting: localTesting
        case .xcode: nil
        }
    }
}
