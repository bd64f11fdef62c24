/// Every metric family and log event StoreLedger emits, in one list: what operators alert on and
/// search for. docs/observability.md documents each; `VocabularyTests` fail on a name the code
/// uses that is missing here, on an entry no code uses, and on an entry the document lacks.
import Configuration
public enum Vocabulary {
    public enum MetricType: String, Sendable { case counter, gauge, histogram }

    public struct Metric: Sendable {
        public let name: String
        public let type: MetricType
        public let labels: [String]
        /// Which processes export it.
        public let processes: String
        public let help: String
    }

    public struct LogEvent: Sendable {
        public let name: String
        public let meaning: String
    }

    public static func metric(named name: String) -> Metric? { metrics.first { $0.name == name } }

    public static let metrics: [Metric] = [
        // HTTP edge
        .init(name: "storeledger_ingest_requests_total", type: .counter, labels: ["route", "status"], processes: "ingest",
              help: "Requests answered, by route and HTTP status."),
        .init(name: "storeledger_offer_requests_total", type: .counter, labels: ["route", "status"], processes: "ingest",
              help: "Offer signature and eligibility requests answered, by route and HTTP status."),
        // The consumer loop (every worker and the signer)
        .init(name: "storeledger_loop_ready", type: .gauge, labels: ["stage"], processes: "workers, signer",
              help: "1 while the loop holds partitions with nothing paused and no outage."),
        .init(name: "storeledger_loop_paused_partitions", type: .gauge, labels: ["stage"], processes: "workers, signer",
              help: "Partitions paused for a retry backoff or an outage."),
        .init(name: "storeledger_loop_batches_total", type: .counter, labels: ["stage"], processes: "workers, signer",
              help: "Batches applied and committed."),
        .init(name: "storeledger_loop_batch_seconds", type: .histogram, labels: ["stage"], processes: "workers, signer",
              help: "Batch latency from process to the PostgreSQL COMMIT (buckets 1 ms to 30 s, with _sum and _count)."),
        .init(name: "storeledger_consumer_lag", type: .gauge, labels: ["stage", "topic", "partition"], processes: "workers, signer",
              help: "Records behind the high watermark per partition held, counted from this member's last commit (a paused partition's watermark asked of the broker)."),
        .init(name: "storeledger_loop_failures_total", type: .counter, labels: ["stage", "class"], processes: "workers, signer",
              help: "Record or batch failures by class: retryable, awaiting_service, permanent, infrastructure, throttled, critical, fenced."),
        .init(name: "storeledger_loop_commit_failures_total", type: .counter, labels: ["stage"], processes: "workers, signer",
              help: "Offset commits the broker refused (sent again later; a restart meanwhile reads the batch again)."),
        .init(name: "storeledger_dead_letters_total", type: .counter, labels: ["stage", "kind"], processes: "workers, signer",
              help: "Records sent to storeledger.deadletter, by error kind."),
        .init(name: "storeledger_loop_retries_total", type: .counter, labels: ["stage", "reason"], processes: "workers, signer",
              help: "Retries scheduled: a record backing off after a retryable failure (record), or everything after an outage (outage)."),
        .init(name: "storeledger_stage_records_total", type: .counter, labels: ["stage", "outcome"], processes: "workers",
              help: "Records in, records out and dead letters per stage."),
        .init(name: "storeledger_ingest_to_ledger_seconds", type: .histogram, labels: [], processes: "worker membership",
              help: "From ingest's acceptance of the input (storeledger.received-at) to the membership COMMIT of each command it caused (buckets 10 ms to 5 min)."),
        // PostgreSQL
        .init(name: "storeledger_pg_errors_total", type: .counter, labels: ["kind"], processes: "ingest, workers",
              help: "PostgreSQL errors: statements the server refused (server), connections that failed or broke (connection)."),
        .init(name: "storeledger_pg_pool_wait_seconds", type: .histogram, labels: [], processes: "ingest",
              help: "How long a borrower waited for a free pooled connection (buckets 100 µs to 10 s)."),
        // The embedded broker (storeledger broker --admin-port)
        .init(name: "storeledger_broker_up", type: .gauge, labels: ["broker"], processes: "broker",
              help: "1 while the mock broker is up, 0 after a down fault until an up fault."),
        .init(name: "storeledger_broker_partitions", type: .gauge, labels: ["topic"], processes: "broker",
              help: "Partitions of each pipeline topic the broker created."),
        .init(name: "storeledger_broker_faults_total", type: .counter, labels: ["fault"], processes: "broker",
              help: "Fault commands applied through the control channel: down, up, rtt, request_errors, clear_errors."),
        .init(name: "storeledger_broker_topic_records", type: .gauge, labels: ["topic"], processes: "broker",
              help: "Records each topic holds (sum of its high watermarks, refreshed every 2 s)."),
        // Stages
        .init(name: "storeledger_decode_total", type: .counter, labels: ["source", "outcome"], processes: "worker decode",
              help: "Raw records decoded, by source and outcome (decoded, decoded_empty, retryable or the dead-letter kind)."),
        .init(name: "storeledger_dedupe_total", type: .counter, labels: ["outcome"], processes: "worker dedupe",
              help: "Events by dedupe outcome: duplicate_event, nothing_new, forwarded, forwarded_no_change."),
        .init(name: "storeledger_ledger_entries_total", type: .counter, labels: [], processes: "worker membership",
              help: "Ledger entries written."),
        // Talking to Apple (App Store Server API)
        .init(name: "storeledger_consumption_answers_total", type: .counter, labels: ["outcome"], processes: "worker consumption",
              help: "CONSUMPTION_REQUEST answers: sent, failed (Apple refused), retry (Apple unreachable or rate limiting)."),
        .init(name: "storeledger_recovery_fed_total", type: .counter, labels: ["environment"], processes: "worker recover",
              help: "Notifications from Apple's history fed into the raw topic by scheduled recovery."),
        .init(name: "storeledger_outbox_events_total", type: .counter, labels: [], processes: "worker membership",
              help: "Membership events written to the outbox (one per membership-changing ledger entry)."),
        .init(name: "storeledger_relay_published_total", type: .counter, labels: [], processes: "worker relay",
              help: "Outbox events published to storeledger.membership.events."),
        .init(name: "storeledger_relay_pruned_total", type: .counter, labels: [], processes: "worker relay",
              help: "Published outbox rows deleted after the retention."),
        .init(name: "storeledger_relay_unreadable_total", type: .counter, labels: [], processes: "worker relay",
              help: "Outbox rows passed over because nothing can rebuild their event (its ledger row deleted or its details damaged by hand)."),
        .init(name: "storeledger_webhook_deliveries_total", type: .counter, labels: ["endpoint", "result"], processes: "worker webhooks",
              help: "Webhook delivery attempts by endpoint and result (delivered, failed)."),
        .init(name: "storeledger_replay_entries_total", type: .counter, labels: ["stage"], processes: "replay",
              help: "Compensating ledger entries written by storeledger replay, by replayed stage."),
        // Signer
        .init(name: "storeledger_signer_requests_total", type: .counter, labels: ["outcome", "kind"], processes: "signer",
              help: "Sign and API-token requests answered, by outcome."),
        .init(name: "storeledger_signer_sign_seconds_sum", type: .counter, labels: [], processes: "signer",
              help: "Seconds spent signing."),
        .init(name: "storeledger_signer_nonces_remembered", type: .gauge, labels: [], processes: "signer",
              help: "Nonces in the 24-hour memory."),
        .init(name: "storeledger_signer_nonce_registry_bytes", type: .gauge, labels: [], processes: "signer",
              help: "Memory of the nonce registry (bounded: grows by a filter as a time slice fills, up to a cap)."),
        .init(name: "storeledger_signer_nonce_redraws_total", type: .counter, labels: [], processes: "signer",
              help: "Nonces drawn again because the memory may have seen them (expected near 0)."),
    ]

    public static let logEvents: [LogEvent] = [
        // Processes and services
        .init(name: "service_started", meaning: "A service of the process started (in boot order)."),
        .init(name: "service_stopped", meaning: "A service stopped (in reverse boot order)."),
        .init(name: "service_failed", meaning: "A service failed; the process stops its other services and exits non-zero."),
        .init(name: "service_stop_overran", meaning: "A service took longer than its stop deadline."),
        .init(name: "signal_received", meaning: "SIGTERM, SIGINT or SIGHUP: the process begins to stop."),
        .init(name: "command_failed", meaning: "A storeledger command ended with an error (exit 1)."),
        .init(name: "admin_listening", meaning: "The admin server (/healthz, /readyz, /metrics) is listening."),
        .init(name: "child_started", meaning: "The supervisor (dev, tests) started a child process."),
        .init(name: "child_exited", meaning: "A supervised child exited; it is restarted when its policy says so."),
        .init(name: "child_killed", meaning: "A supervised child was killed after its stop grace period."),
        .init(name: "child_restart_failed", meaning: "A supervised child could not be restarted."),
        .init(name: "dev_child_failed", meaning: "storeledger dev: a role failed to start."),
        .init(name: "dev_stopped", meaning: "storeledger dev stopped everything it started."),
        // Broker and topics
        .init(name: "broker_ready", meaning: "The embedded broker is up (its bootstrap address follows on stdout)."),
        .init(name: "broker_stopped", meaning: "The embedded broker stopped."),
        .init(name: "broker_fault_injected", meaning: "A fault command of the broker's control channel was applied (tests, chaos runs)."),
        .init(name: "topics_ready", meaning: "The pipeline's topics exist."),
        .init(name: "librdkafka_log", meaning: "A warning or error from librdkafka itself."),
        .init(name: "kafka_partitions_assigned", meaning: "The group gave this member partitions."),
        .init(name: "kafka_partitions_revoked", meaning: "The group took partitions from this member."),
        .init(name: "kafka_rebalance_failed", meaning: "Applying a rebalance failed; the member rejoins."),
        // PostgreSQL
        .init(name: "migrated", meaning: "storeledger migrate finished."),
        .init(name: "schema_migrated", meaning: "One migration was applied."),
        .init(name: "schema_newer_than_binary", meaning: "The database has migrations this binary does not know (a newer release ran)."),
        .init(name: "pg_notice", meaning: "A PostgreSQL notice (debug)."),
        // The consumer loop
        .init(name: "loop_started", meaning: "A consumer loop joined its group."),
        .init(name: "loop_ready", meaning: "The loop holds partitions with nothing paused (readiness turned on)."),
        .init(name: "loop_not_ready", meaning: "Readiness turned off: partitions paused, an outage, or no partitions."),
        .init(name: "loop_stopped", meaning: "The loop committed its last batch and left the group."),
        .init(name: "loop_stopped_critical", meaning: "A critical failure stopped the loop without committing; the worker exits non-zero."),
        .init(name: "batch_failed", meaning: "A batch failed and is split or retried by its failure class."),
        .init(name: "dead_letter", meaning: "A record went to storeledger.deadletter (kind, source position)."),
        .init(name: "partition_claim_deferred", meaning: "A new owner could not claim its partitions at assignment (PostgreSQL away); it claims before its next batch."),
        .init(name: "partitions_paused", meaning: "Partitions paused for a backoff or an outage."),
        .init(name: "partitions_resumed", meaning: "Paused partitions resumed."),
        .init(name: "poll_failed", meaning: "Polling the broker failed; retried."),
        .init(name: "offset_commit_failed", meaning: "The broker refused an offset commit; the offsets go again with the next commit or after a backoff (a restart meanwhile reads the batch again)."),
        .init(name: "failpoint_stop_before_commit", meaning: "Tests only: a stage stopped itself before COMMIT."),
        // Ingest
        .init(name: "ingest_listening", meaning: "Ingest is listening."),
        .init(name: "write_unconfirmed", meaning: "The broker did not confirm a write in time; the client got 503."),
        .init(name: "kafka_producer_failed", meaning: "Ingest's producer failed for good (librdkafka's fatal error): every write would get 503, so ingest stops with exit code 1 to be started again with a new one."),
        .init(name: "read_failed", meaning: "A read API query failed (503)."),
        .init(name: "read_timeout", meaning: "PostgreSQL did not answer a read API query (or /readyz's check) in time: 503."),
        .init(name: "read_refused_saturated", meaning: "Too many read API queries were already waiting on PostgreSQL: 503 at once."),
        .init(name: "support_read_failed", meaning: "A support page's PostgreSQL read failed (503)."),
        .init(name: "support_raw_read_failed", meaning: "A support page could not read a record from the broker (503)."),
        .init(name: "http_library_message", meaning: "A message from libmicrohttpd (debug)."),
        .init(name: "offer_history_failed", meaning: "Reading an account's purchase history for an offer failed."),
        .init(name: "sign_request_failed", meaning: "A sign request could not be sent to the signer."),
        .init(name: "signer_refused", meaning: "The signer refused a request (its reason is returned to the client)."),
        .init(name: "sign_replies_reader_ready", meaning: "Ingest reads the signer's replies."),
        .init(name: "insecure_v1_notifications_accepted", meaning: "Ingest started without a V1 shared secret (the insecure setting): V1 can be forged."),
        .init(name: "no_client_credentials_configured", meaning: "Ingest started with no API key or token key: every client route answers 401."),
        .init(name: "v1_secret_mismatch", meaning: "A V1 notification without the configured shared secret was refused with 401 (debug level)."),
        .init(name: "sign_reply_poll_failed", meaning: "Polling the signer's replies failed; retried."),
        // Signer
        .init(name: "signer_started", meaning: "The signer loaded its keys (ids only are logged)."),
        .init(name: "signer_stopped", meaning: "The signer stopped."),
        .init(name: "request_refused", meaning: "The signer refused a request (unknown key, expired, replayed)."),
        .init(name: "request_invalid", meaning: "A sign request could not be parsed."),
        .init(name: "metrics_write_failed", meaning: "The signer could not write its metrics file."),
        // Membership events and webhooks
        .init(name: "relay_database_unavailable", meaning: "The relay lost PostgreSQL (its lock went with it); it waits with backoff and starts a new session."),
        .init(name: "relay_started", meaning: "The relay holds the relay lock and publishes."),
        .init(name: "relay_recovered", meaning: "The relay marked as published what the topic's tail shows already landed."),
        .init(name: "relay_publish_failed", meaning: "A relay round was not acknowledged; the relay starts over from the topic's tail."),
        .init(name: "relay_failpoint_crash", meaning: "Test failpoint: the relay killed itself between publishing and marking."),
        .init(name: "relay_pruned", meaning: "The relay deleted published outbox rows older than the retention, with their finished webhook deliveries and attempts (counts)."),
        .init(name: "relay_prune_failed", meaning: "A prune failed (publishing goes on); the relay tries again a minute later."),
        .init(name: "relay_event_unreadable", meaning: "Nothing can rebuild an outbox row's event (its ledger row deleted or its details damaged by hand): logged, marked and passed over so the rows behind it go out."),
        .init(name: "relay_waiting_for_newer_release", meaning: "The relay stopped before an outbox row a newer release wrote (details or an event type this release does not know): it and the rows after it wait for that release's relay (logged at most once a minute)."),
        .init(name: "webhooks_started", meaning: "Webhook delivery started for the configured endpoints."),
        .init(name: "webhook_delivering", meaning: "This worker took an endpoint's deliverer lock and now delivers to it (any other worker stands by)."),
        .init(name: "webhook_database_error", meaning: "A webhook endpoint's worker lost PostgreSQL; it waits and reconnects."),
        .init(name: "webhook_endpoint_failed", meaning: "A webhook endpoint's worker stopped on an error (the process exits)."),
        // Tools
        .init(name: "dlq_redriven", meaning: "storeledger dlq redrive sent dead letters back to their source topic."),
        .init(name: "recovery_pass", meaning: "worker recover paged one environment's failed notifications (found, already ingested, fed, failed)."),
        .init(name: "recovery_pass_failed", meaning: "A scheduled recovery pass failed (PostgreSQL, Apple); retried at the next interval."),
        .init(name: "prefilled", meaning: "bench pipeline filled its input topic."),
        .init(name: "replay_finished", meaning: "storeledger replay finished (stage, dry run, records read, subscriptions, entries planned and written, code version)."),
        .init(name: "test_wrong_rule_active", meaning: "Tests only: a worker runs with a deliberately wrong rule (\(Setting.testWrongRule))."),
    ]
}
