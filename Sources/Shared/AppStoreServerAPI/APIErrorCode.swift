/// The `errorCode` values of the App Store Server API that StoreLedger acts on, as Apple's
/// library names them. Responses keep the raw number (`APIFailure.rawErrorCode`); a code not
/// listed here is still reported, it simply has no typed case.
/// https://developer.apple.com/documentation/appstoreserverapi/error_codes
public enum APIErrorCode: Int64, Sendable, CaseIterable {
    case generalBadRequest = 4000000
    case invalidAppIdentifier = 4000002
    case invalidRequestRevision = 4000005
    case invalidTransactionId = 4000006
    case invalidOriginalTransactionId = 4000008
    case invalidExtendByDays = 4000009
    case invalidExtendReasonCode = 4000010
    case invalidRequestIdentifier = 4000011
    case startDateTooFarInPast = 4000012
    case startDateAfterEndDate = 4000013
    case invalidPaginationToken = 4000014
    case invalidStartDate = 4000015
    case invalidEndDate = 4000016
    case paginationTokenExpired = 4000017
    case invalidNotificationType = 4000018
    case multipleFiltersSupplied = 4000019
    case invalidTestNotificationToken = 4000020
    case invalidSort = 4000021
    case invalidProductType = 4000022
    case invalidProductId = 4000023
    case invalidStatus = 4000031
    case invalidAppAccountToken = 4000033
    case invalidConsumptionStatus = 4000034
    case invalidCustomerConsented = 4000035
    case invalidDeliveryStatus = 4000036
    case invalidTransactionNotConsumable = 4000043
    case invalidAppAccountTokenUUID = 4000183
    case transactionIdNotOriginalTransactionId = 4000187
    case subscriptionExtensionIneligible = 4030004
    case subscriptionMaxExtension = 4030005
    case familySharedSubscriptionExtensionIneligible = 4030007
    case accountNotFound = 4040001
    case accountNotFoundRetryable = 4040002
    case appNotFound = 4040003
    case appNotFoundRetryable = 4040004
    case originalTransactionIdNotFound = 4040005
    case originalTransactionIdNotFoundRetryable = 4040006
    case serverNotificationUrlNotFound = 4040007
    case testNotificationNotFound = 4040008
    case statusRequestNotFound = 4040009
    case transactionIdNotFound = 4040010
    case rateLimitExceeded = 4290000
    case generalInternal = 5000000
    case generalInternalRetryable = 5000001

    /// Apple marks these "retryable": the same request may succeed later.
    public var isRetryable: Bool {
        switch self {
        case .accountNotFoundRetryable, .appNotFoundRetryable, .originalTransactionIdNotFoundRetryable,
             .rateLimitExceeded, .generalInternalRetryable: true
        default: false
        }
    }

    /// "This environment does not know that id": a production miss for a sandbox purchase. Apple's
    /// guidance is to ask the sandbox next (Get Transaction Info, Get Transaction History).
    public var meansUnknownInThisEnvironment: Bool {
        switch self {
        case .transactionIdNotFound, .originalTransactionIdNotFound, .accountNotFound, .appNotFound: true
        default: false
        }
    }
}
