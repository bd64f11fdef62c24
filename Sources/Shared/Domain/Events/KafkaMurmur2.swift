/// Kafka's default partitioner (murmur2 of the key, as Java clients and librdkafka's
/// `murmur2_random` compute it), so the relay can pick partitions itself and still agree with any
/// other client writing the same key.
public enum KafkaMurmur2 {
    public static func partition(key: [UInt8], count: Int32) -> Int32 {
        Int32((UInt32(bitPattern: hash(key)) & 0x7fff_ffff) % UInt32(count))
    }

    public static func hash(_ data: [UInt8]) -> Int32 {
        let m: UInt32 = 0x5bd1_e995
        var h: UInt32 = 0x9747_b28c ^ UInt32(truncatingIfNeeded: data.count)
        let whole = data.count / 4 * 4
        var index = 0
        while index < whole {
            var k = UInt32(data[index]) | UInt32(data[index + 1]) << 8 | UInt32(data[index + 2]) << 16 | UInt32(data[index + 3]) << 24
            k = k &* m
            k ^= k >> 24
            k = k &* m
            h = h &* m
            h ^= k
            index += 4
        }
        let rest = data.count - whole
        if rest == 3 { h ^= UInt32(data[whole + 2]) << 16 }
        if rest >= 2 { h ^= UInt32(data[whole + 1]) << 8 }
        if rest >= 1 {
            h ^= UInt32(data[whole])
            h = h &* m
        }
        h ^= h >> 13
        h = h &* m
        h ^= h >> 15
        return Int32(bitPattern: h)
    }
}
