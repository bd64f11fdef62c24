#if canImport(Glibc)
import Glibc
#endif

/// Secrets written to disk (private keys, token secrets) are readable by their owner alone from the
/// first byte. Foundation's `createFile(atPath:contents:attributes:)` writes a temporary file with
/// the default mode, renames it into place and only then applies `.posixPermissions`, so for a moment
/// a new private key is readable by everyone the umask allows.
public enum PrivateFile {
    public struct WriteError: Error, CustomStringConvertible {
        public let path: String
        public let reason: String
        public var description: String { "cannot write \(path): \(reason)" }
    }

    /// Writes `bytes` to `path` with mode 0600, replacing a file there atomically: a temporary file
    /// created 0600 in the same directory (never following a link), written whole, then renamed.
    public static func write(_ bytes: [UInt8], to path: String) throws {
        let temporary = "\(path).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw WriteError(path: path, reason: String(cString: strerror(errno))) }
        var failure: String?
        // The umask may narrow the mode open used; make it exactly owner read-write.
        if fchmod(fd, 0o600) != 0 { failure = String(cString: strerror(errno)) }
        var written = 0
        while failure == nil, written < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { failure = count < 0 ? String(cString: strerror(errno)) : "short write"; break }
            written += count
        }
        if failure == nil, fsync(fd) != 0 { failure = String(cString: strerror(errno)) }
        if close(fd) != 0, failure == nil { failure = String(cString: strerror(errno)) }
        if failure == nil, rename(temporary, path) != 0 { failure = String(cString: strerror(errno)) }
        if let failure {
            unlink(temporary)
            throw WriteError(path: path, reason: failure)
        }
    }
}
