import Domain
import Foundation
import Kafka
import LocalStack
import Runtime
import XCTest

/// Contract: `LocalStack` returns only once each component is ready by its `/readyz` (the broker's
/// meaning its topics exist and a client reads them), on the ports the caller chose; a child that
/// does not come up ends the boot with an error naming it and quoting its standard error, and
/// leaves nothing running; `stop()` stops everything.
final class LocalStackTests: XCTestCase {
    func testTheBrokerIsReadyOnTheChosenPortWithEveryTopic() throws {
        var plan = try Cluster.plan(partitions: 3)
        plan.database = .none
        plan.brokerPort = try FreePort.loopback()
        let stack = try LocalStack.start(plan)
        defer { stack.stop() }
        XCTAssertEqual(stack.bootstrap, "127.0.0.1:\(plan.brokerPort)")
        let admin = try XCTUnwrap(stack.url(of: StackPlan.brokerRole))
        XCTAssertEqual(ReadinessProbe.status(port: try XCTUnwrap(URL(string: admin)?.port)), 200)
        let marks = try TopicWatermarks(config: Cluster.kafka(bootstrap: stack.bootstrap))
        for topic in Topic.all { XCTAssertEqual(try marks.high(topic: topic, partitions: 3).count, 3, topic) }

        let broker = try XCTUnwrap(stack.supervisor.pid(of: StackPlan.brokerRole))
        stack.stop()
        XCTAssertNotEqual(kill(broker, 0), 0, "stop() stops the broker")
    }

    func testAChildThatExitsWhileStartingIsNamedWithTheEndOfItsStandardError() throws {
        var plan = try Cluster.plan(partitions: 1)
        plan.database = .none
        plan.brokerPort = try FreePort.loopback()
        plan.children = [.worker("no-such-stage", onExit: .ignore)]
        let started = Date()
        XCTAssertThrowsError(try LocalStack.start(plan)) { error in
            guard let failure = error as? BootFailure else { return XCTFail("\(error)") }
            XCTAssertEqual(failure.component, "no-such-stage")
            XCTAssertTrue(failure.reason.contains("exited while starting"), failure.reason)
            XCTAssertTrue(failure.stderrTail.contains { $0.contains("unknown stage no-such-stage") }, "\(failure.stderrTail)")
            XCTAssertTrue(failure.description.contains("unknown stage no-such-stage"))
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 30, "a crash is reported at once, not at the readiness deadline")
        XCTAssertEqual(processes(mentioning: "--port \(plan.brokerPort)"), [], "the broker that had started is stopped again")
    }
}
