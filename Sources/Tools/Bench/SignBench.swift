import Configuration
import Crypto
import Domain
import Foundation
import Kafka
import LocalStack
import Runtime
import Signer
import Synchronization

/// `storeledger bench sign`: promotional-offer signing speed next to its ceilings, in one run.
/// - in-process legacy signatures per CPU-second (payload, ECDSA, DER, base64, nonce registry) vs
///   `openssl speed ecdsap256` and the seeds' python-ecdsa sample (goals: >= 70 % of openssl,
///   >= 15x python-ecdsa); all three in CPU time so other load on the machine does not skew them;
/// - Kafka request/reply latency through a `storeledger signer` process at a fixed rate
///   (default 2,000 requests/s; goal p99 <= 20 ms).
public enum SignBench {
    public static func run(_ arguments: Arguments) throws -> Int32 {
        let quick = arguments.has("quick")
        let seconds = Double(try arguments.int("seconds", default: quick ? 1 : 3))
        let rate = try arguments.int("rate", default: 2000)
        let key = try P256PrivateKey.generate()

        let ours = try inProcessSignsPerCPUSecond(key: key, seconds: seconds)
        let bare = try bareSignsPerCPUSecond(key: key, seconds: seconds)
        let openssl = opensslSignsPerSecond(seconds: seconds)
        let python = pythonECDSASignsPerSecond(key: key, seconds: seconds, python: arguments.value("python"))
        var results: [String: Any] = ["storeledger_signs_per_cpu_second": ours, "crypto_sign_only_per_cpu_second": bare]
        print(String(format: "sign   storeledger legacy signature (1 core)   %9.0f signs/s", ours))
        print(String(format: "sign   of which Crypto key.sign alone (1 core) %9.0f signs/s   (the rest: payload, nonce, registry, DER, base64)", bare))
        if let openssl {
            results["openssl_ecdsap256_signs_per_second"] = openssl
            print(String(format: "sign   openssl speed ecdsap256 (1 core)       %9.0f signs/s   storeledger = %.0f %% of openssl (goal >= 70 %%)",
                         openssl, 100 * ours / openssl))
        } else {
            print("sign   openssl speed ecdsap256: not available")
        }
        if let python {
            results["python_ecdsa_signs_per_second"] = python
            print(String(format: "sign   seeds' python-ecdsa sample (1 core)   %9.0f signs/s   storeledger = %.1fx python-ecdsa (goal >= 15x)",
                         python, ours / python))
        } else {
            print("sign   python-ecdsa: not available (scripts/offer-python-env.sh creates .venv)")
        }

        let latency = try requestReplyLatency(key: key, rate: rate, seconds: quick ? 2 : max(seconds, 5), bootstrap: arguments.value("bootstrap"))
        results["kafka_request_reply"] = latency
        print(String(format: "sign   Kafka request/reply via signer process at %d req/s: p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%d sent, %d answered; goal p99 <= 20 ms)",
                     rate, latency["p50_ms"] as! Double, latency["p99_ms"] as! Double, latency["max_ms"] as! Double,
                     latency["sent"] as! Int, latency["answered"] as! Int))
        if arguments.has("json") {
            let data = try JSONSerialization.data(withJSONObject: ["sign": results], options: [.sortedKeys])
            print(String(decoding: data, as: UTF8.self))
        }
        return 0
    }

    /// The signer's own path (registry included), single thread, per CPU-second of that thread.
    static func inProcessSignsPerCPUSecond(key: P256PrivateKey, seconds: Double) throws -> Double {
        let signer = OfferSigner(keys: try SigningKeyRing(keys: ["BENCHKEY01": key]))
        let start = CPUTime.threadSeconds()
        var count = 0
        while CPUTime.threadSeconds() - start < seconds {
            for _ in 0..<100 {
                _ = try signer.signLegacy(bundleId: "com.example.app", productId: "com.example.vip.1m", offerId: "winback_50",
                                          applicationUsername: "9f1c2d3e-user-token")
            }
            count += 100
        }
        return Double(count) / (CPUTime.threadSeconds() - start)
    }

    /// The ECDSA call alone (EVP_DigestSign over the payload), to show where the time goes.
    static func bareSignsPerCPUSecond(key: P256PrivateKey, seconds: Double) throws -> Double {
        let payload = Array(PromotionalOfferPayload(bundleId: "com.example.app", keyIdentifier: "BENCHKEY01", productIdentifier: "com.example.vip.1m",
                                                    offerIdentifier: "winback_50", applicationUsername: "9f1c2d3e-user-token",
                                                    nonce: UUID().uuidString, timestampMs: currentTimeMs()).bytes)
        let start = CPUTime.threadSeconds()
        var count = 0
        while CPUTime.threadSeconds() - start < seconds {
            for _ in 0..<100 { _ = try key.sign(payload) }
            count += 100
        }
        return Double(count) / (CPUTime.threadSeconds() - start)
    }

    /// `openssl speed -mr` prints `+F4:<n>:256:<sign/s>:<verify/s>`.
    static func opensslSignsPerSecond(seconds: Double) -> Double? {
        guard let output = try? capture("/usr/bin/env", ["openssl", "speed", "-seconds", String(Int(max(1, seconds))), "-mr", "ecdsap256"]) else { return nil }
        for line in output.split(separator: "\n") where line.hasPrefix("+F4:") {
            let fields = line.split(separator: ":")
            if fields.count >= 5 { return Double(fields[3]) }
        }
        return nil
    }

    static func pythonECDSASignsPerSecond(key: P256PrivateKey, seconds: Double, python: String?) -> Double? {
        let root = packageRoot()
        guard let interpreter = python ?? (try? capture("/bin/bash", ["\(root)/scripts/offer-python-env.sh"]))?
            .trimmingCharacters(in: .whitespacesAndNewlines),
              let keyFile = try? temporaryKeyFile(key) else { return nil }
        defer { try? FileManager.default.removeItem(atPath: keyFile) }
        guard let output = try? capture(interpreter, ["\(root)/scripts/apple_python_offer.py", "ecdsa-bench", keyFile, String(seconds)]),
              let object = try? JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any] else { return nil }
        return object["signs_per_second"] as? Double
    }

    /// Sends sign requests at `rate` to a `storeledger signer` child process and times each reply.
    static func requestReplyLatency(key: P256PrivateKey, rate: Int, seconds: Double, bootstrap: String?) throws -> [String: Any] {
        let keyFile = try temporaryKeyFile(key)
        defer { try? FileManager.default.removeItem(atPath: keyFile) }
        // The broker in this process (or the one given), no database, the signer as a child.
        var plan = try StackPlan.benchmark(partitions: 4)
        plan.database = .none
        if let bootstrap { plan.broker = .given(bootstrap) }
        plan.environment = [Setting.kafkaSessionTimeoutMs.name: "6000", Setting.logLevel.name: "warning"]
        plan.children = [.signer(environment: [Setting.signingKeys.name: "BENCHKEY01=\(keyFile)"], onExit: .ignore)]
        let stack = try LocalStack.start(plan)
        defer { stack.stop(grace: .seconds(5)) }
        let servers = stack.bootstrap

        var kafka = KafkaConfig(bootstrapServers: servers, clientId: "bench-sign")
        kafka.linger = .milliseconds(0)
        kafka.sessionTimeout = .seconds(6)
        kafka.extra = ["socket.nagle.disable": "true"]
        let producer = try KafkaProducer(config: kafka)
        defer { producer.close() }
        kafka.extra = ["fetch.wait.max.ms": "2", "fetch.error.backoff.ms": "5", "auto.offset.reset": "latest", "socket.nagle.disable": "true"]
        let consumer = try KafkaConsumer(config: kafka, groupId: "bench-sign-\(UUID().uuidString)", topics: [Topic.signReplies])
        defer { consumer.close() }

        let sentAt = Mutex<[String: ContinuousClock.Instant]>([:])
        let latencies = Mutex<[Double]>([])
        let reading = Atomic<Bool>(true)
        let warm = Atomic<Bool>(false)
        let reader = Thread {
            while reading.load(ordering: .acquiring) {
                guard let records = try? consumer.poll(maxRecords: 1000, timeout: .milliseconds(50)) else { continue }
                let now = ContinuousClock.now
                for record in records {
                    guard let reply = try? JSONDecoder().decode(SignReply.self, from: Data(record.value)) else { continue }
                    if reply.correlationId.hasPrefix("warmup") { warm.store(true, ordering: .releasing); continue }
                    if let sent = sentAt.withLock({ $0.removeValue(forKey: reply.correlationId) }) {
                        latencies.withLock { $0.append((now - sent).secondsDouble * 1000) }
                    }
                }
            }
        }
        reader.start()
        defer { reading.store(false, ordering: .releasing) }

        func request(_ id: String) -> [UInt8] {
            let request = SignRequest(correlationId: id, deadlineMs: currentTimeMs() + 5000, kind: .legacy, bundleId: "com.example.app",
                                      productId: "com.example.vip.1m", offerId: "winback_50", applicationUsername: "user")
            return [UInt8]((try? JSONEncoder().encode(request)) ?? Data())
        }
        // Warm up until a reply comes back: both consumer groups are assigned and the path is hot.
        let warmDeadline = ContinuousClock.now + .seconds(30)
        var warmups = 0
        while !warm.load(ordering: .acquiring) {
            guard ContinuousClock.now < warmDeadline else { throw UsageError("the signer did not answer within 30 s") }
            let id = "warmup-\(warmups)"
            warmups += 1
            producer.send(topic: Topic.signRequests, key: Array(id.utf8), value: request(id)) { _ in }
            Thread.sleep(forTimeInterval: 0.2)
        }
        Thread.sleep(forTimeInterval: 0.5)

        let total = Int(Double(rate) * seconds)
        let interval = Duration.nanoseconds(Int64(1e9 / Double(max(1, rate))))
        let start = ContinuousClock.now
        for index in 0..<total {
            let due = start + interval * index
            if due > ContinuousClock.now { Thread.sleep(forTimeInterval: (due - ContinuousClock.now).secondsDouble) }
            let id = "bench-\(index)"
            let value = request(id)
            sentAt.withLock { $0[id] = ContinuousClock.now }
            producer.send(topic: Topic.signRequests, key: Array(id.utf8), value: value) { _ in }
        }
        let drainDeadline = ContinuousClock.now + .seconds(5)
        while sentAt.withLock({ !$0.isEmpty }), ContinuousClock.now < drainDeadline { Thread.sleep(forTimeInterval: 0.05) }
        let achieved = Double(total) / (ContinuousClock.now - start).secondsDouble
        let sorted = latencies.withLock { $0 }.sorted()
        func percentile(_ p: Double) -> Double { sorted.isEmpty ? .nan : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
        return ["rate": rate, "sent": total, "answered": sorted.count, "p50_ms": percentile(0.50), "p99_ms": percentile(0.99),
                "max_ms": sorted.last ?? .nan, "offered_rate_including_drain": achieved]
    }

    private static func temporaryKeyFile(_ key: P256PrivateKey) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bench-sign-\(UUID().uuidString).p8").path
        try PrivateFile.write(Array(try key.pkcs8PEM().utf8), to: path)
        return path
    }

    private static func executablePath() throws -> String {
        try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
    }

    /// The package root when run from the build directory (…/.build/debug/storeledger), else the cwd.
    private static func packageRoot() -> String {
        var url = URL(fileURLWithPath: (try? executablePath()) ?? CommandLine.arguments[0])
        for _ in 0..<6 {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url.path }
        }
        return FileManager.default.currentDirectoryPath
    }

    private static func capture(_ executable: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw UsageError("\(executable) exited \(process.terminationStatus)") }
        return String(decoding: data, as: UTF8.self)
    }
}
