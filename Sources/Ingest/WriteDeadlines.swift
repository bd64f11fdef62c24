import Foundation
import HTTPServer
import Runtime
import Synchronization

/// The guard behind every write's answer: a request whose delivery report has not come by its
/// deadline is answered 503, so a caller never waits unbounded even if the report itself is late.
/// Every write gets the same timeout, so deadlines fall due in the order they were set: one thread
/// sweeps a FIFO every `interval`, instead of a dispatch timer per request (a timer set up and a
/// thread woken for every request, on ingest's request path).
final class WriteDeadlines: Sendable {
    struct Watch: Sendable {
        let responder: HTTPResponder
        let route: String
    }

    private let timeout: Duration
    private let pending = DeadlineQueue<Watch>()
    private let stopped = StopSignal()

    /// `expired` runs on the sweeping thread for each watch past its deadline, answered or not
    /// (`HTTPResponder.respond` says which).
    init(timeout: Duration, interval: Duration = .milliseconds(100), expired: @escaping @Sendable (Watch) -> Void) {
        self.timeout = timeout
        // The thread holds the queue and the signal, not self, so dropping the service ends it.
        let pending = self.pending, stopped = self.stopped
        let thread = Thread {
            // A sleep, not `StopSignal.wait(timeout:)`, which keeps a semaphore per timed-out wait.
            while !stopped.isStopped {
                Thread.sleep(forTimeInterval: interval.secondsDouble)
                for watch in pending.due(at: .now) { expired(watch) }
            }
        }
        thread.name = "ingest-write-deadlines"
        thread.start()
    }

    deinit { stop() }

    func watch(_ responder: HTTPResponder, route: String) {
        pending.append(Watch(responder: responder, route: route), deadline: .now + timeout)
    }

    /// Ends the sweeping thread within one interval; watches still queued are dropped.
    func stop() { stopped.stop() }
}

/// Items whose deadlines fall due in the order they were added (each gets the same timeout): an
/// array and the index of its oldest item not yet taken.
final class DeadlineQueue<Item: Sendable>: Sendable {
    private let queue = Mutex((items: [(deadline: ContinuousClock.Instant, item: Item)](), head: 0))

    func append(_ item: Item, deadline: ContinuousClock.Instant) {
        queue.withLock { $0.items.append((deadline, item)) }
    }

    /// Removes and returns the items due at `now`, oldest first. Stops at the first item not due,
    /// so an item added with an earlier deadline than the one before it waits for that one.
    func due(at now: ContinuousClock.Instant) -> [Item] {
        queue.withLock { queue in
            let start = queue.head
            while queue.head < queue.items.count, queue.items[queue.head].deadline <= now { queue.head += 1 }
            let due = queue.items[start..<queue.head].map(\.item)
            // Compact once the taken prefix is the larger part, so appending stays amortised O(1).
            if queue.head >= 1024, queue.head * 2 >= queue.items.count {
                queue.items.removeFirst(queue.head)
                queue.head = 0
            }
            return due
        }
    }

    /// Items not yet taken.
    var count: Int { queue.withLock { $0.items.count - $0.head } }
}
