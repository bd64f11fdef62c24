import Foundation
import Runtime
import Synchronization
import XCTest

/// Contract (Runtime's ServiceGroup): services start in order and stop in reverse order when the
/// process is told to stop; readiness is the conjunction of all; a service ending on its own stops
/// the others and its exit code becomes the group's; a service that ignores the stop past the
/// grace makes the group exit non-zero instead of hanging.
final class ServiceGroupTests: XCTestCase {
    final class Journal: Sendable {
        let entries = Mutex<[String]>([])
        func withLock<T>(_ body: (inout [String]) -> T) -> T { entries.withLock { body(&$0) } }
    }

    final class Probe: Service {
        let name: String
        let journal: Journal
        let ready = Atomic<Bool>(false)
        let code: Int32?
        let ignoresStop: Bool
        init(_ name: String, journal: Journal, endsWith code: Int32? = nil, ignoresStop: Bool = false) {
            self.name = name
            self.journal = journal
            self.code = code
            self.ignoresStop = ignoresStop
        }
        var isReady: Bool { ready.load(ordering: .acquiring) }
        func run(until stop: StopSignal) throws -> Int32 {
            journal.withLock { $0.append("start \(name)") }
            ready.store(true, ordering: .releasing)
            if let code { return code }
            stop.wait()
            if ignoresStop { Thread.sleep(forTimeInterval: 2) }
            journal.withLock { $0.append("stop \(name)") }
            return 0
        }
    }

    func testStartsInOrderStopsInReverse() throws {
        let journal = Journal()
        let first = Probe("first", journal: journal), second = Probe("second", journal: journal)
        let group = ServiceGroup([first, second], logger: Logger(component: "test"))
        let stop = StopSignal()
        let code = Mutex<Int32?>(nil)
        Thread.detachNewThread { code.withLock { $0 = group.run(until: stop) } }
        try waitFor { group.isReady }
        XCTAssertEqual(journal.withLock { $0 }.prefix(2).sorted(), ["start first", "start second"])
        stop.stop()
        try waitFor { code.withLock { $0 } != nil }
        XCTAssertEqual(code.withLock { $0 }, 0)
        XCTAssertEqual(Array(journal.withLock { $0 }.suffix(2)), ["stop second", "stop first"])
    }

    func testAServiceEndingOnItsOwnStopsTheOthersWithItsCode() throws {
        let journal = Journal()
        let server = Probe("admin", journal: journal), loop = Probe("loop", journal: journal, endsWith: 3)
        XCTAssertEqual(ServiceGroup([server, loop], logger: Logger(component: "test")).run(until: StopSignal()), 3)
        XCTAssertTrue(journal.withLock { $0 }.contains("stop admin"))
    }

    func testOverrunningTheGraceExitsNonZero() {
        let journal = Journal()
        let stubborn = Probe("stubborn", journal: journal, ignoresStop: true)
        let group = ServiceGroup([stubborn], logger: Logger(component: "test"), shutdownGrace: .milliseconds(200))
        let stop = StopSignal()
        stop.stop()
        let started = Date()
        XCTAssertEqual(group.run(until: stop), 1)
        XCTAssertLessThan(Date().timeIntervalSince(started), 1.5, "the group does not wait past its grace")
    }

    struct Timeout: Error {}

    private func waitFor(_ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(10)
        while !condition() {
            guard Date() < deadline else { throw Timeout() }
            Thread.sleep(forTimeInterval: 0.01)
        }
    }
}
