import Foundation
import Signer
import Synchronization
import XCTest

/// Contract: a nonce is issued at most once within 24 h. The registry refuses any nonce issued in
/// the window (no false negatives), forgets it after the window, stays within its fixed memory
/// whatever the load, and the signer redraws when its random source repeats. Across 100,000
/// signatures no nonce repeats.
final class NonceRegistryTests: XCTestCase {
    private let hour: Int64 = 3_600_000

    func testIssuedNonceIsRefusedForTheWholeWindowThenForgotten() {
        let registry = NonceRegistry(sizing: .init(expectedPerSlice: 1000))
        let nonce = UUID()
        let start: Int64 = 1_700_000_000_000
        XCTAssertTrue(registry.register(nonce, nowMs: start))
        XCTAssertFalse(registry.register(nonce, nowMs: start + 1))
        XCTAssertTrue(registry.contains(nonce, nowMs: start + 24 * hour - 1))
        XCTAssertFalse(registry.register(nonce, nowMs: start + 24 * hour - 1), "still inside 24 h")
        XCTAssertFalse(registry.contains(nonce, nowMs: start + 25 * hour + 1), "a slice wholly older than 24 h is dropped")
        XCTAssertTrue(registry.register(nonce, nowMs: start + 25 * hour + 1))
    }

    func testNoFalseNegativesEvenFarPastItsSizing() {
        // Sized for 100 per slice, loaded with 20,000: redraws get frequent, forgetting never happens.
        let registry = NonceRegistry(sizing: .init(expectedPerSlice: 100, falsePositiveRate: 0.01))
        let nonces = (0..<20_000).map { _ in UUID() }
        var accepted: [UUID] = []
        for (index, nonce) in nonces.enumerated() where registry.register(nonce, nowMs: Int64(index)) { accepted.append(nonce) }
        XCTAssertFalse(accepted.isEmpty)
        for nonce in accepted { XCTAssertFalse(registry.register(nonce, nowMs: 30_000)) }
    }

    /// A burst five times a slice's sizing opens more filters: redraws stay rare instead of most
    /// nonces being refused for the rest of the window.
    func testABurstBeyondASlicesSizingOpensAnotherFilter() {
        let registry = NonceRegistry(sizing: .init(expectedPerSlice: 1000, falsePositiveRate: 0.001))
        let refused = (0..<5_000).filter { _ in !registry.register(UUID(), nowMs: 1_000) }.count
        XCTAssertLessThan(refused, 100, "one filter of 1,000 loaded with 5,000 would refuse ~70 %")
        XCTAssertEqual(registry.stats.nonces, 5_000 - refused)
        XCTAssertLessThanOrEqual(registry.stats.bytes, 6 * 2_000)
    }

    func testMemoryIsBoundedBySlices() {
        let sizing = NonceRegistry.Sizing(window: .seconds(24), slices: 24, expectedPerSlice: 1000)
        let registry = NonceRegistry(sizing: sizing)
        for second in 0..<200 { _ = registry.register(UUID(), nowMs: Int64(second) * 1000) }
        let stats = registry.stats
        XCTAssertLessThanOrEqual(stats.bytes, 25 * 2_000, "at most slices+1 filters of ~1.8 KB")
        XCTAssertLessThanOrEqual(stats.nonces, 25)
        // Far past the sizing, filters stop at twice the sized day.
        let flooding = NonceRegistry.Sizing(window: .seconds(24), slices: 24, expectedPerSlice: 10)
        let one = NonceRegistry(sizing: flooding)
        _ = one.register(UUID(), nowMs: 0)
        let flooded = NonceRegistry(sizing: flooding)
        for index in 0..<5_000 { _ = flooded.register(UUID(), nowMs: Int64(index % 1000)) }
        XCTAssertEqual(flooded.stats.bytes, (1 + 25) * one.stats.bytes, "500 filters' worth of nonces in one slice: its filter and 25 more")
        // Flooded slice after slice, the whole window stays within the same bound.
        let everyHour = NonceRegistry(sizing: flooding)
        for index in 0..<20_000 { _ = everyHour.register(UUID(), nowMs: Int64(index / 200) * 1000) }
        XCTAssertLessThanOrEqual(everyHour.stats.bytes, 2 * 25 * one.stats.bytes)
    }

    func testSignerRedrawsWhenTheRandomSourceRepeats() throws {
        let repeated = UUID(uuidString: "AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE")!
        let draws = Mutex(0)
        let signer = OfferSigner(keys: try SigningKeyRing(keys: ["K": try SignerFixtures.signingKey()]),
                                 nonces: NonceRegistry(sizing: .init(expectedPerSlice: 1000)), clock: { 1_000 },
                                 newNonce: { draws.withLock { $0 += 1; return $0 <= 3 ? repeated : UUID() } })
        let first = try signer.signLegacy(bundleId: "b", productId: "p", offerId: "o", applicationUsername: "u")
        let second = try signer.signLegacy(bundleId: "b", productId: "p", offerId: "o", applicationUsername: "u")
        XCTAssertEqual(first.nonce, "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee")
        XCTAssertNotEqual(second.nonce, first.nonce)
        XCTAssertEqual(draws.withLock { $0 }, 4, "two refused repeats, then a fresh one")

        let stuck = OfferSigner(keys: signer.keys, nonces: signer.nonces, clock: { 1_000 }, newNonce: { repeated })
        XCTAssertThrowsError(try stuck.signLegacy(bundleId: "b", productId: "p", offerId: "o", applicationUsername: "u"),
                             "a broken random source fails closed instead of reusing")
    }

    func testNoNonceRepeatsAcross100kSignatures() throws {
        let signer = OfferSigner(keys: try SigningKeyRing(keys: ["K": try SignerFixtures.signingKey()]))
        let count = 100_000
        let seen = Mutex(Set<String>(minimumCapacity: count))
        // Both cores, as the worker signs batches.
        DispatchQueue.concurrentPerform(iterations: 8) { slice in
            var local: [String] = []
            local.reserveCapacity(count / 8)
            for _ in 0..<(count / 8) {
                guard let signed = try? signer.signLegacy(bundleId: "com.example", productId: "vip.1m", offerId: "o",
                                                          applicationUsername: "u") else { continue }
                local.append(signed.nonce)
            }
            seen.withLock { $0.formUnion(local) }
        }
        XCTAssertEqual(seen.withLock { $0.count }, count)
        XCTAssertTrue(seen.withLock { $0.allSatisfy { $0 == $0.lowercased() && $0.count == 36 } })
    }
}
