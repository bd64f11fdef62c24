import Foundation
import Runtime
import XCTest

/// A relayed child's standard error reaches the file and the tail to its last byte, however quickly
/// children come and go: it is read with blocking reads on a thread per child, because tearing down
/// `FileHandle.readabilityHandler` sources crashed the supervising process in libdispatch on Linux.
final class SupervisorStderrTests: XCTestCase {
    func testEveryChildsStandardErrorIsRelayedToItsLastLineWhileChildrenComeAndGo() throws {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("supervisor-stderr-\(UUID().uuidString).log")
        defer { try? FileManager.default.removeItem(at: log) }
        let supervisor = Supervisor(executable: "/bin/sh")
        let children = 40
        for index in 0..<children {
            // Two whole lines and a last one without a newline; every other child also lingers a moment.
            let script = "printf 'first %s\\nsecond %s\\nlast %s' \(index) \(index) \(index) >&2" + (index.isMultiple(of: 2) ? "; sleep 0.2" : "")
            try supervisor.start(.init(role: "child-\(index)", arguments: ["-c", script], onExit: .ignore, stderr: .relay(to: log.path)))
        }
        let deadline = Date().addingTimeInterval(20)
        func relayed(_ index: Int) -> Bool { supervisor.stderrTail(of: "child-\(index)").last == "last \(index)" }
        while Date() < deadline, !(0..<children).allSatisfy(relayed) { Thread.sleep(forTimeInterval: 0.05) }
        for index in 0..<children {
            XCTAssertEqual(supervisor.stderrTail(of: "child-\(index)"), ["first \(index)", "second \(index)", "last \(index)"])
        }
        supervisor.stopAll(grace: .seconds(1))

        let lines = try String(contentsOf: log, encoding: .utf8).split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 3 * children, "every line once, whole")
        for index in 0..<children {
            let own = lines.filter { $0.hasSuffix(" \(index)") }
            XCTAssertEqual(own, ["first \(index)", "second \(index)", "last \(index)"], "one child's lines in its order")
        }
    }
}
