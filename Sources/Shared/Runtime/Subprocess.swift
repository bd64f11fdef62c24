import Foundation

/// Runs a short-lived program to completion with posix_spawn + waitpid. Foundation's `Process`
/// can miss the exit of a child that leaves a daemon behind (pg_ctl start) once another `Process`
/// with a termination handler exists in the same program, and then `waitUntilExit` never returns.
public enum Subprocess {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Returns the exit status (128+signal when killed). Output (stdout and stderr) goes to
    /// `outputPath` when given, else to /dev/null; stdin is /dev/null.
    public static func run(_ executable: String, _ arguments: [String], outputPath: String? = nil) throws -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath ?? "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard spawned == 0 else {
            throw Failure(description: "cannot run \(executable): \(String(cString: strerror(spawned)))")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { throw Failure(description: "waitpid(\(executable)) failed: errno \(errno)") }
        }
        let low = status & 0x7f
        return low == 0 ? (status >> 8) & 0xff : 128 + low
    }
}

extension FileHandle {
    /// Reads to the end of stream with blocking reads, handing each chunk to `body` as it arrives. Meant
    /// for a thread of its own. Not a `readabilityHandler`: tearing down its dispatch read source races
    /// libdispatch's epoll bookkeeping on Linux and has crashed the whole process in
    /// `_dispatch_event_loop_drain` (swift-corelibs-libdispatch issue 949) while children stopped.
    public func readChunksUntilEnd(_ body: (Data) -> Void) {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fileDescriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                body(Data(chunk[..<count]))
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                return
            }
        }
    }
}
