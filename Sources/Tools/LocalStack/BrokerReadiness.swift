import Domain
import Kafka
import Runtime

/// What "the broker is ready" means, for `storeledger broker`'s `/readyz` and for a broker run in
/// process: a Kafka client connected through the bootstrap address and read every pipeline topic's
/// high watermarks (metadata plus a ListOffsets per partition), so the broker accepts connections
/// and its topics exist.
public enum BrokerReadiness {
    /// Retries for up to `timeout`; throws the last client error when the broker never answered.
    public static func confirmTopics(bootstrap: String, partitions: Int32, timeout: Duration = .seconds(30), stop: StopSignal) throws {
        let deadline = ContinuousClock.now + timeout
        while true {
            do {
                let marks = try TopicWatermarks(config: KafkaConfig(bootstrapServers: bootstrap, clientId: "storeledger-broker-ready"))
                for topic in Topic.all { _ = try marks.high(topic: topic, partitions: partitions) }
                return
            } catch {
                if ContinuousClock.now >= deadline || stop.isStopped { throw error }
                _ = stop.wait(timeout: .milliseconds(200))
            }
        }
    }
}
