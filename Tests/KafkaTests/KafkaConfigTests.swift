@testable import Kafka
import XCTest

/// The librdkafka properties a KafkaConfig sets: a stage that calls Apple per record may spend longer
/// than librdkafka's 300 s default on a batch, and only its consumer is told so.
final class KafkaConfigTests: XCTestCase {
    func testMaxPollIntervalReachesTheConsumerOnly() {
        var config = KafkaConfig(bootstrapServers: "b", clientId: "c")
        XCTAssertNil(config.consumerProperties(groupId: "g")["max.poll.interval.ms"], "librdkafka's default unless set")
        config.maxPollInterval = .seconds(1800)
        XCTAssertEqual(config.consumerProperties(groupId: "g")["max.poll.interval.ms"], "1800000")
        XCTAssertNil(config.producerProperties()["max.poll.interval.ms"], "a producer would warn about a consumer property")
        config.extra["max.poll.interval.ms"] = "600000"
        XCTAssertEqual(config.consumerProperties(groupId: "g")["max.poll.interval.ms"], "600000", "raw properties still win")
    }
}
