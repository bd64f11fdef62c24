/// The reasons of ownership changes name both accounts ("moved from user A to user B", Apply's
/// `applyLink` and `applyClaim`): the evidence support needs (R4). An end user reading their own
/// ledger sees the other account only as "another account": user ids are personal data.
public enum OwnershipReason {
    /// (before the first id, between the ids, where the second id may end), as Apply writes them.
    static let templates: [(lead: String, middle: String, ends: [String])] = [
        ("moved from user ", " to user ", [" (", ": its "]),
        ("moved to user ", " from user ", [" (", ": its "]),
        ("; user ", " claimed this subscription of user ", [": refused"]),
    ]

    /// `reason` with every account but `user` written as "another account".
    public static func hidingOtherAccounts(_ reason: String, keeping user: String) -> String {
        var text = reason
        for template in templates {
            guard let lead = text.range(of: template.lead),
                  let middle = text.range(of: template.middle, range: lead.upperBound..<text.endIndex) else { continue }
            let secondEnd = template.ends.compactMap { text.range(of: $0, range: middle.upperBound..<text.endIndex)?.lowerBound }.min()
                ?? text.endIndex
            let first = String(text[lead.upperBound..<middle.lowerBound])
            let second = String(text[middle.upperBound..<secondEnd])
            // "user " opens each id: the lead and middle end with it; hide "user <id>" whole.
            let firstName = UserId.same(first, user) ? "user \(first)" : "another account"
            let secondName = UserId.same(second, user) ? "user \(second)" : "another account"
            let leadText = String(template.lead.dropLast("user ".count))
            let middleText = String(template.middle.dropLast("user ".count))
            text.replaceSubrange(lead.lowerBound..<secondEnd, with: leadText + firstName + middleText + secondName)
        }
        // The command's own cause names the claimant (Classify): "receipt uploaded by app user B",
        // "… carries appAccountToken B" (the token is the account's id).
        for (lead, hidden) in [("receipt uploaded by app user ", "receipt uploaded by another account"),
                               ("carries appAccountToken ", "carries another account's appAccountToken")] {
            guard let start = text.range(of: lead) else { continue }
            let end = text.range(of: "; ", range: start.upperBound..<text.endIndex)?.lowerBound ?? text.endIndex
            if !UserId.same(String(text[start.upperBound..<end]), user) {
                text.replaceSubrange(start.lowerBound..<end, with: hidden)
            }
        }
        return text
    }
}
