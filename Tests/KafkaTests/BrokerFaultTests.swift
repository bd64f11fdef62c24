import Foundation
import Kafka
import XCTest

/// Contract: the embedded broker's fault channel parses exactly the documented commands (anything
/// else is a 4xx with the reason, never a crash), and each fault really happens on the mock
/// cluster: injected Produce errors are retried through by the idempotent producer, an added
/// round-trip time slows every reply, a broker set down refuses writes until it is up again.
/// Consumer lag is read per partition from the watermarks and the group's commits.
final class BrokerFaultTests: XCTestCase {
    func testParsesEveryCommandAndRefusesTheRest() {
        func parse(_ path: String, _ query: [String: String] = [:], method: String = "POST") -> Result<BrokerFault, BrokerFaultError> {
            BrokerFault.parse(method: method, path: path, query: query)
        }
        XCTAssertEqual(try parse("/brokers/1/down").get(), .down(broker: 1))
        XCTAssertEqual(try parse("/brokers/all/up").get(), .up(broker: -1))
        XCTAssertEqual(try parse("/brokers/2/rtt", ["ms": "250"]).get(), .roundTripTime(broker: 2, milliseconds: 250))
        XCTAssertEqual(try parse("/errors", ["api": "offsetcommit", "error": "NOT_COORDINATOR", "count": "3"]).get(),
                       .requestErrors(.offsetCommit, .notCoordinator, count: 3))
        XCTAssertEqual(try parse("/errors", ["api": "Heartbeat", "error": "rebalance_in_progress"]).get(),
                       .requestErrors(.heartbeat, .rebalanceInProgress, count: 1))
        XCTAssertEqual(try parse("/errors/clear", ["api": "Produce"]).get(), .clearErrors(.produce))

        let refused: [(String, String, [String: String], Int)] = [
            ("GET", "/brokers/1/down", [:], 405),
            ("POST", "/brokers/0/down", [:], 400),
            ("POST", "/brokers/x/up", [:], 400),
            ("POST", "/brokers/1/rtt", ["ms": "999999"], 400),
            ("POST", "/brokers/1/rtt", [:], 400),
            ("POST", "/errors", ["api": "Nope", "error": "NOT_COORDINATOR"], 400),
            ("POST", "/errors", ["api": "Produce", "error": "SOMETHING"], 400),
            ("POST", "/errors", ["api": "Produce", "error": "NOT_COORDINATOR", "count": "0"], 400),
            ("POST", "/errors", ["api": "Produce", "error": "NOT_COORDINATOR", "count": "99999999999999999999"], 400),
            ("POST", "/brokers/1/explode", [:], 404),
            ("POST", "/", [:], 404),
        ]
        for (method, path, query, status) in refused {
            guard case .failure(let error) = parse(path, query, method: method) else { return XCTFail("\(method) \(path) \(query) accepted") }
            XCTAssertEqual(error.status, status, "\(method) \(path) \(query): \(error.reason)")
            XCTAssertFalse(error.reason.isEmpty)
        }
    }

    func testInjectedFaultsHappenOnTheMockCluster() throws {
        let broker = try EmbeddedBroker()
        let topic = "faults-\(UUID().uuidString.prefix(8))"
        try broker.createTopic(topic, partitions: 1)
        let config = KafkaConfig(bootstrapServers: broker.bootstrapServers, clientId: "fault-tests", deliveryTimeout: .seconds(20))
        let producer = try KafkaProducer(config: config)
        defer { producer.close() }
        _ = try producer.sendAndWait(topic: topic, key: nil, value: [1], timeout: .seconds(10))

        // Retriable Produce errors: the producer retries through them; the record lands once.
        try BrokerFault.requestErrors(.produce, .notEnoughReplicas, count: 3).apply(to: broker)
        let retried = try producer.sendAndWait(topic: topic, key: nil, value: [2], timeout: .seconds(15))
        XCTAssertEqual(retried.offset, 1, "written once after the injected failures")

        // Added round-trip time slows the acknowledgement by at least that much.
        try BrokerFault.roundTripTime(broker: 1, milliseconds: 400).apply(to: broker)
        let slowStart = ContinuousClock.now
        _ = try producer.sendAndWait(topic: topic, key: nil, value: [3], timeout: .seconds(15))
        XCTAssertGreaterThanOrEqual(ContinuousClock.now - slowStart, .milliseconds(400))
        try BrokerFault.roundTripTime(broker: 1, milliseconds: 0).apply(to: broker)

        // Down: nothing is acknowledged; up again: the same producer delivers.
        try BrokerFault.down(broker: -1).apply(to: broker)
        XCTAssertThrowsError(try producer.sendAndWait(topic: topic, key: nil, value: [4], timeout: .seconds(2)))
        try BrokerFault.up(broker: -1).apply(to: broker)
        let after = try producer.sendAndWait(topic: topic, key: nil, value: [5], timeout: .seconds(20))
        XCTAssertGreaterThanOrEqual(after.offset, 3)

        // Lag of a group from outside it: nothing committed means everything is behind.
        let lag = try GroupLag(config: config, groupId: "nobody-\(UUID().uuidString.prefix(6))")
        let behind = try lag.lag(topics: [topic], partitions: 1)
        XCTAssertEqual(behind[PartitionID(topic: topic, partition: 0)], after.offset + 1)
    }
}
