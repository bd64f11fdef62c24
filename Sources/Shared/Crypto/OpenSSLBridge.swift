import COpenSSL
import Foundation
import CivilCalendar

/// Small helpers for moving bytes in and out of OpenSSL's DER/PEM/BIO calls.
enum OpenSSLBridge {
    typealias D2I = (UnsafeMutablePointer<UnsafePointer<UInt8>?>, Int) -> OpaquePointer?

    /// Runs a `d2i_*` decoder over the whole buffer. Returns the object only if the decoder
    /// consumed every byte: trailing data means the input is not what it claims to be.
    /// `free` releases an object that parsed but left trailing bytes.
    static func decodeDER(_ bytes: [UInt8], free: (OpaquePointer) -> Void, _ decode: D2I) -> OpaquePointer? {
        guard !bytes.isEmpty, bytes.count <= Int(Int32.max) else { return nil }
        return bytes.withUnsafeBufferPointer { buffer -> OpaquePointer? in
            guard let base = buffer.baseAddress else { return nil }
            var cursor: UnsafePointer<UInt8>? = base
            guard let object = decode(&cursor, buffer.count) else { return nil }
            guard let end = cursor, end == base + buffer.count else {
                free(object)
                return nil
            }
            return object
        }
    }

    /// Runs an `i2d_*` encoder twice: once for the length, once into a Swift buffer.
    static func encodeDER(_ encode: (UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?) -> Int32) -> [UInt8]? {
        let length = encode(nil)
        guard length > 0 else { return nil }
        var output = [UInt8](repeating: 0, count: Int(length))
        let written = output.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return encode(&cursor)
        }
        guard written == length else { return nil }
        return output
    }

    /// A read-only memory BIO over `bytes`, valid only inside `body`.
    static func withReadBIO<R>(_ bytes: [UInt8], _ body: (OpaquePointer) -> R?) -> R? {
        guard bytes.count <= Int(Int32.max) else { return nil }
        return bytes.withUnsafeBytes { raw -> R? in
            // BIO_new_mem_buf rejects a null buffer, which an empty array may have: use an empty memory BIO.
            let made = raw.baseAddress.map { BIO_new_mem_buf($0, Int32(raw.count)) } ?? BIO_new(BIO_s_mem())
            guard let bio = made else { return nil }
            defer { BIO_free(bio) }
            return body(bio)
        }
    }

    /// A writable memory BIO; returns what `body` wrote. `secure` uses OpenSSL's secure heap
    /// buffer, which is wiped when freed (for private-key exports).
    static func collectingBIO(secure: Bool = false, _ body: (OpaquePointer) -> Bool) -> [UInt8]? {
        guard let bio = BIO_new(secure ? BIO_s_secmem() : BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard body(bio) else { return nil }
        var data: UnsafeMutablePointer<CChar>?
        let length = storeledger_BIO_get_mem_data(bio, &data)
        guard length >= 0 else { return nil }
        guard length > 0, let data else { return [] }
        return data.withMemoryRebound(to: UInt8.self, capacity: length) { Array(UnsafeBufferPointer(start: $0, count: length)) }
    }

    /// `time_t` for X509_VERIFY_PARAM_set_time; clamps non-finite or absurd dates.
    static func timeT(_ date: Date) -> time_t {
        let seconds = date.timeIntervalSince1970
        guard seconds.isFinite else { return 0 }
        let clamped = min(max(seconds.rounded(.down), -62_135_596_800), 253_402_300_799)  // years 1...9999
        return time_t(clamped)
    }

    /// An ASN1_TIME as a Date (UTC), via the proleptic Gregorian calendar.
    static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date? {
        guard let time else { return nil }
        var parts = tm()
        guard ASN1_TIME_to_tm(time, &parts) == 1 else { return nil }
        let days = Int(CivilDate.days(year: Int64(parts.tm_year) + 1900, month: Int64(parts.tm_mon) + 1, day: Int64(parts.tm_mday)))
        let seconds = days * 86_400 + Int(parts.tm_hour) * 3600 + Int(parts.tm_min) * 60 + Int(parts.tm_sec)
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        for byte in bytes { out += [digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]] }
        return String(decoding: out, as: UTF8.self)
    }
}
