/// The query of Get Transaction History (v2). https://developer.apple.com/documentation/appstoreserverapi/get-transaction-history
public struct TransactionHistoryRequest: Sendable, Equatable {
    public enum Sort: String, Sendable { case ascending = "ASCENDING", descending = "DESCENDING" }

    /// ms since 1970.
    public var startDate: Int64?
    public var endDate: Int64?
    public var productIds: [String]
    public var sort: Sort?
    public var revoked: Bool?

    public init(startDate: Int64? = nil, endDate: Int64? = nil, productIds: [String] = [], sort: Sort? = .ascending, revoked: Bool? = nil) {
        self.startDate = startDate
        self.endDate = endDate
        self.productIds = productIds
        self.sort = sort
        self.revoked = revoked
    }

    var queryItems: [(String, String)] {
        var items: [(String, String)] = []
        if let startDate { items.append(("startDate", String(startDate))) }
        if let endDate { items.append(("endDate", String(endDate))) }
        items += productIds.map { ("productId", $0) }
        if let sort { items.append(("sort", sort.rawValue)) }
        if let revoked { items.append(("revoked", String(revoked))) }
        return items
    }
}
