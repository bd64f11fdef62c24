import Foundation
import Runtime
import Synchronization

/// A service running on a thread of its own for one test: `stop()` stops it and waits for its run to
/// return; `failure` is what the run threw, if it ended by throwing.
final class ServiceThread: Sendable {
    private let stopSignal = StopSignal()
    private let done = DispatchSemaphore(value: 0)
    private let thrown = Mutex<String?>(nil)

    init(_ service: some Service) {
        Thread.detachNewThread { [self] in
            do { _ = try service.run(until: stopSignal) } catch { thrown.withLock { $0 = String(describing: error) } }
            done.signal()
        }
    }

    var failure: String? { thrown.withLock { $0 } }

    func stop() {
        stopSignal.stop()
        done.wait()
    }
}
