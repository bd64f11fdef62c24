/// The body of an error answer. https://developer.apple.com/documentation/appstoreserverapi/error_codes
public struct ErrorPayload: Codable, Sendable, Equatable {
    public var errorCode: Int64?
    public var errorMessage: String?
    public init(errorCode: Int64?, errorMessage: String?) {
        self.errorCode = errorCode
        self.errorMessage = errorMessage
    }
}
