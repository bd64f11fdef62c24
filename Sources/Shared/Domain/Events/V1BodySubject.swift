/// R16: one V1 body, several subscriptions. `unified_receipt` can hold every subscription of the
/// Apple ID, but the body's type and top-level facts (`auto_renew_status`, its change date,
/// `expiration_intent`, a CANCEL's cancellation) describe one of them: the one named by the
/// top-level `original_transaction_id`, else the one holding the purchase a CANCEL's top-level
/// `web_order_line_item_id` names, else the one `auto_renew_product_id` renews as (or whose latest
/// purchase is of that product). The others take only their own `pending_renewal_info`.
public enum V1BodySubject {
    /// One subscription of the body as the decoder saw it.
    public struct Candidate: Sendable, Equatable {
        public var originalTransactionId: String
        /// `pending_renewal_info.auto_renew_product_id` of this subscription.
        public var renewsAs: String?
        /// The product of its latest purchase in `latest_receipt_info`.
        public var latestProduct: String?
        /// The web order line items of its purchases in `latest_receipt_info`.
        public var webOrderLineItemIds: Set<String>
        public init(originalTransactionId: String, renewsAs: String?, latestProduct: String?, webOrderLineItemIds: Set<String> = []) {
            self.originalTransactionId = originalTransactionId
            self.renewsAs = renewsAs
            self.latestProduct = latestProduct
            self.webOrderLineItemIds = webOrderLineItemIds
        }
    }

    /// The original_transaction_id the top-level facts describe; nil when the body does not say
    /// which of several subscriptions it is about (then none of them takes those facts).
    public static func of(topLevelOriginalTransactionId: String?, autoRenewProductId: String?,
                          webOrderLineItemId: String? = nil, candidates: [Candidate]) -> String? {
        if candidates.count == 1 { return candidates[0].originalTransactionId }
        if let named = topLevelOriginalTransactionId { return named }
        if let web = webOrderLineItemId {
            let holding = candidates.filter { $0.webOrderLineItemIds.contains(web) }
            if holding.count == 1 { return holding[0].originalTransactionId }
        }
        guard let product = autoRenewProductId else { return nil }
        for matches in [{ (c: Candidate) in c.renewsAs == product }, { (c: Candidate) in c.latestProduct == product }] {
            let found = candidates.filter(matches)
            if found.count == 1 { return found[0].originalTransactionId }
        }
        return nil
    }
}
