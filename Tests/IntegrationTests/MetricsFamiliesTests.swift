import Domain
import Foundation
import Simulator
import XCTest

/// Contract (issue 15): after a scenario run on the real cluster, every process's `/metrics` has each
/// family docs/observability.md promises it, with plausible values. Ingest: requests by route and
/// status, PostgreSQL errors and pool waits. Each consumer stage and the signer: records per stage and
/// outcome (stages), retries, paused partitions, consumer lag per partition held, the batch latency
/// histogram (its count equal to the batches committed, buckets cumulative, +Inf equal to the count);
/// decode's dead letters by kind (the run includes a record decode must refuse); membership's
/// ingest -> ledger latency histogram; PostgreSQL errors on every process that talks to it. The
/// embedded broker (`storeledger broker --admin-port`): up state, partitions and records per topic,
/// faults applied. Values are read as Prometheus text, the way a scraper reads them.
final class MetricsFamiliesTests: XCTestCase {
    func testEveryProcessExportsItsFamiliesAfterAScenarioRun() throws {
        let sim = try SimulationCluster(signerAdmin: true)
        defer { sim.stop() }
        let cluster = sim.cluster
        let admin = TestCredentials.bearer(TestCredentials.adminKey)

        // Traffic: scenarios S1 (purchase), S5 (refund) and S12 (promotional offers through the signer).
        let results = ScenarioRunner(context: sim.scenarioContext).run(Scenarios.named(["S1", "S5", "S12"])) { print($0.text) }
        for result in results where !result.passed { XCTFail(result.text) }
        // A V2 body that passes the edge (it looks like a compact JWS) but that decode must dead-letter.
        XCTAssertEqual(try HTTP.post("\(sim.ingestURL)/v1/notifications/appstore", json: ["signedPayload": "bm90.YSBqd3M.c2ln"]).status, 200)
        // Reads through ingest's pools, and a refusal (a service key on an operator route).
        XCTAssertEqual(try HTTP.get("\(sim.ingestURL)/v1/users/nobody-\(UUID().uuidString.prefix(8))/membership").status, 404)
        XCTAssertEqual(try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks", authorization: admin).status, 200)
        XCTAssertEqual(try HTTP.get("\(sim.ingestURL)/v1/admin/webhooks").status, 403)
        // One fault command that changes nothing (0 ms extra round trip), so the broker counts one.
        try cluster.brokerFault("/brokers/1/rtt?ms=0")

        let stages = Cluster.stages
        var scraped: [String: Exposition] = [:]
        func scrapeAll() throws {
            scraped["ingest"] = try Exposition(try HTTP.get("\(sim.ingestURL)/metrics", authorization: admin))
            for role in stages + Cluster.relays + ["broker"] {
                scraped[role] = try Exposition(try HTTP.get("\(try XCTUnwrap(cluster.adminURLs[role]))/metrics", authorization: nil))
            }
            scraped["signer"] = try Exposition(try HTTP.get("\(try XCTUnwrap(sim.signerAdminURL))/metrics", authorization: nil))
        }
        // Settled: the dead letter is out, every stage has committed what it read, the lag gauges were
        // refreshed at 0 and the broker counted the raw records; then two scrapes agree on the batches.
        try waitUntil("the pipeline settled and every family is there", timeout: 90, interval: 1) {
            try scrapeAll()
            let settled = scraped["decode"]!.sum("storeledger_dead_letters_total", ["stage": "decode"]) >= 1
                && stages.allSatisfy { stage in
                    let lags = scraped[stage]!.samples("storeledger_consumer_lag", ["stage": stage])
                    return !lags.isEmpty && lags.allSatisfy { $0.value == 0 }
                }
                && scraped["membership"]!.value("storeledger_ingest_to_ledger_seconds_count") ?? 0 > 0
                && scraped["broker"]!.value("storeledger_broker_topic_records", ["topic": Topic.notificationsRaw]) ?? 0
                    >= max(1, scraped["ingest"]!.value("storeledger_ingest_requests_total", ["route": "notification", "status": "200"]) ?? 1)
                && scraped["signer"]!.sum("storeledger_signer_requests_total", [:]) > 0
            guard settled else { return false }
            let before = stages.map { scraped[$0]!.sum("storeledger_loop_batches_total", [:]) }
            Thread.sleep(forTimeInterval: 1)
            try scrapeAll()
            return before == stages.map { scraped[$0]!.sum("storeledger_loop_batches_total", [:]) }
        }

        // Ingest: HTTP by route and status, PostgreSQL errors and pool waits.
        let ingest = scraped["ingest"]!
        XCTAssertGreaterThan(ingest.value("storeledger_ingest_requests_total", ["route": "notification", "status": "200"]) ?? 0, 0)
        XCTAssertEqual(ingest.value("storeledger_ingest_requests_total", ["route": "admin_webhooks", "status": "403"]), 1)
        // Every route counts, the probes and the scrapes too (the boot waited on /readyz; earlier scrapes are in this one).
        XCTAssertGreaterThan(ingest.value("storeledger_ingest_requests_total", ["route": "readyz", "status": "200"]) ?? 0, 0)
        XCTAssertGreaterThan(ingest.value("storeledger_ingest_requests_total", ["route": "metrics", "status": "200"]) ?? 0, 0)
        XCTAssertGreaterThan(ingest.sum("storeledger_offer_requests_total", [:]), 0, "S12 asked for signatures")
        assertPGErrors(ingest, "ingest")
        assertHistogram(ingest, "storeledger_pg_pool_wait_seconds", [:], "ingest", atMost: 10)

        // Each consumer stage: records, retries, paused partitions, lag per partition, batch latency.
        for stage in stages {
            let metrics = scraped[stage]!
            let labels = ["stage": stage]
            XCTAssertGreaterThan(metrics.value("storeledger_stage_records_total", ["stage": stage, "outcome": "in"]) ?? 0, 0, stage)
            XCTAssertNotNil(metrics.value("storeledger_stage_records_total", ["stage": stage, "outcome": "out"]), stage)
            XCTAssertNotNil(metrics.value("storeledger_stage_records_total", ["stage": stage, "outcome": "dead_letter"]), stage)
            assertLoopFamilies(metrics, stage)
            XCTAssertEqual(metrics.value("storeledger_loop_ready", labels), 1, stage)
            if ["dedupe", "membership"].contains(stage) { assertPGErrors(metrics, stage) }
        }
        let decode = scraped["decode"]!
        XCTAssertGreaterThanOrEqual(decode.sum("storeledger_dead_letters_total", ["stage": "decode"]), 1)
        XCTAssertTrue(decode.samples("storeledger_dead_letters_total", ["stage": "decode"]).allSatisfy { !($0.labels["kind"] ?? "").isEmpty },
                      "dead letters are by kind")
        XCTAssertGreaterThanOrEqual(decode.value("storeledger_stage_records_total", ["stage": "decode", "outcome": "dead_letter"]) ?? 0, 1)

        // Membership: the ledger was written, and the ingest -> ledger latency of each command.
        let membership = scraped["membership"]!
        XCTAssertGreaterThan(membership.value("storeledger_ledger_entries_total") ?? 0, 0)
        assertHistogram(membership, "storeledger_ingest_to_ledger_seconds", [:], "membership", atMost: 120)
        // One observation per command committed; `in` also counts attempts that were rolled back.
        XCTAssertLessThanOrEqual(membership.value("storeledger_ingest_to_ledger_seconds_count") ?? .infinity,
                                 membership.value("storeledger_stage_records_total", ["stage": "membership", "outcome": "in"]) ?? 0)

        // The relay talks to PostgreSQL and published the outbox.
        let relay = scraped["relay"]!
        assertPGErrors(relay, "relay")
        XCTAssertGreaterThan(relay.value("storeledger_relay_published_total") ?? 0, 0)

        // The signer: its loop, and the requests it answered.
        let signer = scraped["signer"]!
        assertLoopFamilies(signer, "signer")
        XCTAssertGreaterThan(signer.sum("storeledger_signer_requests_total", [:]), 0)

        // The embedded broker: up, its topics and what they hold, the fault it applied.
        let broker = scraped["broker"]!
        XCTAssertEqual(broker.value("storeledger_broker_up", ["broker": "1"]), 1)
        for topic in Topic.all { XCTAssertEqual(broker.value("storeledger_broker_partitions", ["topic": topic]), 4, topic) }
        XCTAssertEqual(broker.value("storeledger_broker_faults_total", ["fault": "rtt"]), 1)
        let raw = broker.value("storeledger_broker_topic_records", ["topic": Topic.notificationsRaw]) ?? 0
        XCTAssertGreaterThanOrEqual(raw, ingest.value("storeledger_ingest_requests_total", ["route": "notification", "status": "200"]) ?? .infinity,
                                    "every accepted notification is a raw record")
        XCTAssertEqual(try HTTP.get("\(cluster.adminURLs["broker"]!)/readyz", authorization: nil).status, 200)
        print("[metrics] ingest \(ingest.samples.count) samples, broker \(broker.samples.count); raw records \(Int(raw)), ledger latency p_count "
              + "\(Int(membership.value("storeledger_ingest_to_ledger_seconds_count") ?? 0)) sum \(membership.value("storeledger_ingest_to_ledger_seconds_sum") ?? 0) s")
    }

    /// The consumer loop's families for `stage`: retries by reason, paused partitions (none once
    /// settled), lag per partition held, batches committed and their latency histogram.
    private func assertLoopFamilies(_ metrics: Exposition, _ stage: String, file: StaticString = #filePath, line: UInt = #line) {
        let labels = ["stage": stage]
        for reason in ["record", "outage"] {
            XCTAssertGreaterThanOrEqual(metrics.value("storeledger_loop_retries_total", ["stage": stage, "reason": reason]) ?? -1, 0,
                                        "\(stage) retries (\(reason))", file: file, line: line)
        }
        XCTAssertEqual(metrics.value("storeledger_loop_paused_partitions", labels), 0, "\(stage) paused", file: file, line: line)
        let lags = metrics.samples("storeledger_consumer_lag", labels)
        XCTAssertFalse(lags.isEmpty, "\(stage) lag per partition", file: file, line: line)
        for lag in lags {
            XCTAssertNotNil(lag.labels["topic"], file: file, line: line)
            XCTAssertNotNil(lag.labels["partition"].flatMap { Int($0) }, "\(stage) lag names its partition", file: file, line: line)
            XCTAssertGreaterThanOrEqual(lag.value, 0, file: file, line: line)
        }
        XCTAssertEqual(Set(lags.map { $0.labels["partition"]! + $0.labels["topic"]! }).count, lags.count, "one gauge per partition", file: file, line: line)
        let batches = metrics.value("storeledger_loop_batches_total", labels) ?? 0
        XCTAssertGreaterThan(batches, 0, "\(stage) committed batches", file: file, line: line)
        assertHistogram(metrics, "storeledger_loop_batch_seconds", labels, stage, atMost: 30, file: file, line: line)
        XCTAssertEqual(metrics.value("storeledger_loop_batch_seconds_count", labels), batches, "\(stage): one latency per batch", file: file, line: line)
    }

    private func assertPGErrors(_ metrics: Exposition, _ role: String, file: StaticString = #filePath, line: UInt = #line) {
        for kind in ["connection", "server"] {
            let value = metrics.value("storeledger_pg_errors_total", ["kind": kind])
            XCTAssertNotNil(value, "\(role) exports PostgreSQL errors (\(kind))", file: file, line: line)
            // The cluster's PostgreSQL stayed up: no connection broke.
            if kind == "connection" { XCTAssertEqual(value, 0, "\(role): no connection failed", file: file, line: line) }
        }
    }

    /// A histogram with observations: buckets cumulative, +Inf equal to `_count`, a mean within `atMost` seconds.
    private func assertHistogram(_ metrics: Exposition, _ name: String, _ labels: [String: String], _ role: String, atMost: Double,
                                 file: StaticString = #filePath, line: UInt = #line) {
        let count = metrics.value("\(name)_count", labels) ?? 0
        let sum = metrics.value("\(name)_sum", labels) ?? -1
        XCTAssertGreaterThan(count, 0, "\(role) \(name) has observations", file: file, line: line)
        XCTAssertGreaterThanOrEqual(sum, 0, "\(role) \(name)_sum", file: file, line: line)
        XCTAssertLessThanOrEqual(sum / max(count, 1), atMost, "\(role) \(name): plausible mean", file: file, line: line)
        let buckets = metrics.samples("\(name)_bucket", labels)
            .compactMap { sample in sample.labels["le"].map { ($0 == "+Inf" ? Double.infinity : Double($0) ?? .nan, sample.value) } }
            .sorted { $0.0 < $1.0 }
        XCTAssertGreaterThan(buckets.count, 2, "\(role) \(name) buckets", file: file, line: line)
        XCTAssertEqual(buckets.last?.0, .infinity, file: file, line: line)
        XCTAssertEqual(buckets.last?.1, count, "\(role) \(name): +Inf bucket = count", file: file, line: line)
        XCTAssertEqual(buckets.map(\.1), buckets.map(\.1).sorted(), "\(role) \(name): buckets are cumulative", file: file, line: line)
    }
}

/// Prometheus text exposition, parsed: one sample per line (`name{k="v",...} value`).
struct Exposition {
    struct Sample {
        var name: String
        var labels: [String: String]
        var value: Double
    }
    let samples: [Sample]

    init(_ response: HTTP.Response) throws {
        guard response.status == 200 else { throw ClusterError("/metrics answered \(response.status): \(response.text)") }
        self.init(text: response.text)
    }

    init(text: String) {
        samples = text.split(separator: "\n").compactMap { line -> Sample? in
            guard !line.hasPrefix("#"), let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { return nil }
            let series = line[..<space]
            guard let brace = series.firstIndex(of: "{") else { return Sample(name: String(series), labels: [:], value: value) }
            var labels: [String: String] = [:]
            // Label values here are ids, names and numbers: no escaped quotes or commas inside them.
            for pair in series[series.index(after: brace)..<series.index(before: series.endIndex)].split(separator: ",") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { labels[String(parts[0])] = String(parts[1].dropFirst().dropLast()) }
            }
            return Sample(name: String(series[..<brace]), labels: labels, value: value)
        }
    }

    /// Samples of `name` whose labels include `labels`.
    func samples(_ name: String, _ labels: [String: String] = [:]) -> [Sample] {
        samples.filter { sample in sample.name == name && labels.allSatisfy { key, value in sample.labels[key] == value } }
    }

    /// The one sample of `name` with exactly these labels (besides none others), or nil.
    func value(_ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    func sum(_ name: String, _ labels: [String: String]) -> Double { samples(name, labels).map(\.value).reduce(0, +) }
}
