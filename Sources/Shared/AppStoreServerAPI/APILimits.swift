/// Bounds on everything an App Store Server API response may contain. Apple's pages hold at most
/// 20 items and a signed transaction is a few KiB; the limits leave room for growth while keeping
/// one response's cost bounded. A response over a limit is refused as invalid, never truncated.
public enum APILimits {
    /// Whole response body.
    public static let maxResponseBytes = 4 * 1024 * 1024
    /// Signed transactions, notifications or status groups in one response.
    public static let maxItemsPerPage = 200
    /// Last transactions in one subscription group of Get All Subscription Statuses.
    public static let maxLastTransactionsPerGroup = 200
    /// Send attempts of one notification (Apple makes at most 6).
    public static let maxSendAttempts = 50
    /// One compact JWS (`signedTransactionInfo`, `signedPayload`...).
    public static let maxSignedDataBytes = 64 * 1024
    /// `revision`, `paginationToken`, `testNotificationToken`, `requestIdentifier`.
    public static let maxCursorBytes = 4096
    /// Apple's `errorMessage`, kept for the operator (longer text is cut).
    public static let maxErrorMessageCharacters = 200
    /// Ids StoreLedger puts in a URL path (transaction ids, product ids, order ids).
    public static let maxPathIdBytes = 128
}
