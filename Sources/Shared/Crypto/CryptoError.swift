import COpenSSL

/// Every failure of this module: what we were doing, plus OpenSSL's drained error queue.
///
/// Never carries key material or input bytes: only our message and OpenSSL's error strings.
public struct CryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What failed, in our words ("parse X.509 certificate").
    public let message: String
    /// OpenSSL's error queue at the time of failure, oldest first (may be empty).
    public let openSSLErrors: [String]

    public init(_ message: String, openSSLErrors: [String] = []) {
        self.message = message
        self.openSSLErrors = openSSLErrors
    }

    public var description: String {
        openSSLErrors.isEmpty ? message : "\(message): \(openSSLErrors.joined(separator: "; "))"
    }

    /// Builds an error and empties this thread's OpenSSL error queue into it.
    static func drainingQueue(_ message: String) -> CryptoError {
        CryptoError(message, openSSLErrors: OpenSSLErrorQueue.drain())
    }
}

/// OpenSSL keeps a per-thread error queue; leftovers would leak into the next error message.
enum OpenSSLErrorQueue {
    static func drain() -> [String] {
        var messages: [String] = []
        while true {
            var data: UnsafePointer<CChar>?
            var flags: Int32 = 0
            let code = ERR_get_error_all(nil, nil, nil, &data, &flags)
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            var text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if flags & ERR_TXT_STRING != 0, let data, data.pointee != 0 {
                text += " (\(String(cString: data)))"
            }
            messages.append(text)
        }
        return messages
    }

    /// Used where a failure is an expected value (a bad signature), not an error.
    static func clear() { ERR_clear_error() }
}
