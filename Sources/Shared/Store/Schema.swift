import Postgres

/// StoreLedger's PostgreSQL schema, as versioned migrations. Every table carries its partition key
/// (the subscription, or the user for per-user projections) first in its primary key, so state can
/// later be distributed like the topics.
public enum Schema {
    public static let migrations: [Migration] = [
        Migration(version: 1, name: "pipeline core", sql: """
        -- Dedupe: purchases by identity (R1), their transaction id aliases, notifications seen.
        CREATE TABLE purchases (
            subscription_key text NOT NULL,
            purchase_id      text NOT NULL,
            state            jsonb NOT NULL,   -- KnownPurchase: merged facts + aliases
            first_seen_at    timestamptz NOT NULL DEFAULT now(),
            updated_at       timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (subscription_key, purchase_id)
        );
        CREATE TABLE transaction_aliases (
            subscription_key text NOT NULL,
            transaction_id   text NOT NULL,
            purchase_id      text NOT NULL,
            PRIMARY KEY (subscription_key, transaction_id)
        );
        CREATE TABLE seen_events (
            subscription_key text NOT NULL,
            event_key        text NOT NULL,
            seen_at          timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (subscription_key, event_key)
        );

        -- Membership: per subscription state, grants per purchase, the append-only ledger (R4)
        -- and the membership projection rebuilt from it.
        CREATE TABLE subscriptions (
            subscription_key text PRIMARY KEY,
            user_id          text,
            state            jsonb NOT NULL,   -- SubscriptionState, a projection of the ledger
            updated_at       timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX subscriptions_user ON subscriptions (user_id) WHERE user_id IS NOT NULL;
        CREATE TABLE grants (
            subscription_key   text NOT NULL,
            purchase_id        text NOT NULL,
            group_id           text NOT NULL,
            product_id         text NOT NULL,
            transaction_id     text NOT NULL,
            grant_facts        jsonb NOT NULL,
            is_trial           boolean NOT NULL,
            is_intro           boolean NOT NULL,
            promotional_offer_id text,
            offer_code_ref_name  text,
            PRIMARY KEY (subscription_key, purchase_id)
        );
        CREATE TABLE ledger (
            subscription_key text NOT NULL,
            entry_id         bigserial NOT NULL,
            kind             text NOT NULL,
            purchase_id      text,
            group_id         text,
            interval_start_ms bigint,
            interval_end_ms  bigint,
            amount           integer,
            before_intervals jsonb NOT NULL,
            after_intervals  jsonb NOT NULL,
            reason           text NOT NULL,
            command_id       text NOT NULL,
            cause            jsonb NOT NULL,
            user_id          text,
            created_at       timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (subscription_key, entry_id)
        );
        CREATE INDEX ledger_user ON ledger (user_id, entry_id) WHERE user_id IS NOT NULL;
        CREATE TABLE membership (
            subscription_key text NOT NULL,
            group_id         text NOT NULL,
            intervals        jsonb NOT NULL,
            expires_ms       bigint,
            updated_at       timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (subscription_key, group_id)
        );
        """),
        Migration(version: 2, name: "users, per-user membership, finance facts", sql: """
        -- Apple's retries of one input: counted, so support sees them and tests can wait for them.
        ALTER TABLE seen_events ADD COLUMN deliveries integer NOT NULL DEFAULT 1,
                                ADD COLUMN last_seen_at timestamptz NOT NULL DEFAULT now();

        -- One row per app user: membership workers lock it before touching the user's projection,
        -- so two workers updating two subscriptions of one user serialise (R6).
        CREATE TABLE users (
            user_id    text PRIMARY KEY,
            created_at timestamptz NOT NULL DEFAULT now()
        );

        -- Per-user membership per group (R6): the union over the user's subscriptions, with the
        -- current product, renewal state and consumable balance (GroupMembership JSON in view).
        CREATE TABLE user_membership (
            user_id     text NOT NULL,
            group_id    text NOT NULL,
            intervals   jsonb NOT NULL,
            expires_ms  bigint,
            view        jsonb NOT NULL,
            updated_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (user_id, group_id)
        );
        ALTER TABLE membership ADD COLUMN view jsonb;

        -- R10 finance facts, one row per purchase (identity R1), kept in step with the subscription's
        -- owner. Offer eligibility (R8, R9) reads it by (user_id, group_id).
        ALTER TABLE grants ADD COLUMN user_id text,
                           ADD COLUMN original_transaction_id text,
                           ADD COLUMN product_kind text,
                           ADD COLUMN purchase_ms bigint,
                           ADD COLUMN expires_ms bigint,
                           ADD COLUMN cancellation_ms bigint,
                           ADD COLUMN cut_kind text,
                           ADD COLUMN offer_type integer,
                           ADD COLUMN offer_identifier text,
                           ADD COLUMN environment text,
                           ADD COLUMN granted_start_ms bigint,
                           ADD COLUMN granted_end_ms bigint,
                           ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
        CREATE INDEX grants_user_group ON grants (user_id, group_id) WHERE user_id IS NOT NULL;

        -- Ledger details: machine-readable cut kind, product, balance after a credit or debit.
        ALTER TABLE ledger ADD COLUMN product_id text,
                           ADD COLUMN cut_kind text,
                           ADD COLUMN balance_after integer;
        """),
        Migration(version: 3, name: "partition owner fences", sql: """
        -- Fencing (issue 9): a member that takes a partition bumps its generation here before its
        -- first batch; every batch checks, in its transaction, that the generation is still the one
        -- it claimed, so a zombie (evicted after a long pause) cannot commit effects for it.
        CREATE TABLE partition_owners (
            group_id   text NOT NULL,
            topic      text NOT NULL,
            partition  integer NOT NULL,
            generation bigint NOT NULL,
            owner      text NOT NULL,
            claimed_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (group_id, topic, partition)
        );
        """),
        Migration(version: 4, name: "environment on ledger lines and subscriptions, offer discount type", sql: """
        -- R18: environments never merge (the subscription key carries a non-Production environment)
        -- and support sees which environment every ledger line and subscription is from.
        ALTER TABLE ledger ADD COLUMN environment text;
        ALTER TABLE subscriptions ADD COLUMN environment text;
        -- R10: a free offer period and a paid one differ in finance.
        ALTER TABLE grants ADD COLUMN offer_discount_type text;
        """),
        Migration(version: 5, name: "App Store Server API: refresh revisions, consumption answers, support actions", sql: """
        -- Refresh (issue 16): the Get Transaction History revision last read, per subscription
        -- (subscription_key = original transaction id, environment-qualified like every key), so
        -- the next refresh asks only for what changed since.
        CREATE TABLE api_revisions (
            subscription_key text PRIMARY KEY,
            revision         text NOT NULL,
            updated_at       timestamptz NOT NULL DEFAULT now()
        );
        -- Every answer to a CONSUMPTION_REQUEST, append-only beside the ledger: the facts the
        -- policy read, the body sent (or why none was), Apple's outcome. One per notification.
        CREATE TABLE consumption_answers (
            subscription_key  text NOT NULL,
            notification_uuid text NOT NULL,
            transaction_id    text NOT NULL,
            user_id           text,
            environment       text,
            request_reason    text,
            policy            text NOT NULL,
            facts             jsonb NOT NULL,
            request           jsonb,
            outcome           text NOT NULL,   -- sent | not-sent | failed
            detail            text,
            requested_ms      bigint,
            answered_at       timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (subscription_key, notification_uuid)
        );
        CREATE INDEX consumption_answers_user ON consumption_answers (user_id) WHERE user_id IS NOT NULL;
        -- Support actions sent to Apple (renewal-date extensions, one or mass), append-only, with who and why.
        CREATE TABLE support_actions (
            target      text NOT NULL,    -- subscription_key, or product:<id>@<environment> for a mass extension
            action_id   bigserial NOT NULL,
            kind        text NOT NULL,    -- extend | mass-extend
            admin       text NOT NULL,
            reason      text NOT NULL,
            request     jsonb NOT NULL,
            outcome     jsonb NOT NULL,
            created_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (target, action_id)
        );
        """),
        Migration(version: 6, name: "membership events outbox, webhook deliveries, subscription metrics", sql: """
        -- Transactional outbox (issue 17): one row per membership-changing ledger entry, written in the
        -- ledger's transaction; the relay publishes it to storeledger.membership.events and marks it.
        -- Keyed like the topic (the user, or the subscription while it has none).
        CREATE TABLE membership_outbox (
            event_key        text NOT NULL,
            entry_id         bigint NOT NULL,      -- the ledger entry (ledger.entry_id)
            subscription_key text NOT NULL,
            event_type       text NOT NULL,
            payload          text NOT NULL,        -- the exact bytes published (MembershipEvent JSON)
            relay_seq        bigint,               -- the relay's publication order, assigned before sending
            kafka_partition  integer,
            published_at     timestamptz,
            created_at       timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (event_key, entry_id)
        );
        CREATE INDEX membership_outbox_unpublished ON membership_outbox (entry_id) WHERE published_at IS NULL;
        CREATE UNIQUE INDEX membership_outbox_seq ON membership_outbox (relay_seq) WHERE relay_seq IS NOT NULL;
        CREATE SEQUENCE membership_relay_seq;

        -- Webhooks: a cursor over the relay order per endpoint, one delivery row per event and
        -- endpoint, and every attempt. Endpoint URLs and secrets live in configuration only.
        CREATE TABLE webhook_cursors (
            endpoint_id text PRIMARY KEY,
            last_seq    bigint NOT NULL DEFAULT 0,
            updated_at  timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE webhook_deliveries (
            endpoint_id      text NOT NULL,
            entry_id         bigint NOT NULL,
            relay_seq        bigint NOT NULL,
            event_key        text NOT NULL,
            event_type       text NOT NULL,
            status           text NOT NULL,       -- pending | delivered | gave_up
            attempts         integer NOT NULL DEFAULT 0,
            next_attempt_at  timestamptz NOT NULL DEFAULT now(),
            first_attempt_at timestamptz,
            last_attempt_at  timestamptz,
            delivered_at     timestamptz,
            last_status      integer,
            last_error       text,
            PRIMARY KEY (endpoint_id, entry_id)
        );
        CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, event_key, relay_seq) WHERE status = 'pending';
        CREATE TABLE webhook_attempts (
            endpoint_id  text NOT NULL,
            entry_id     bigint NOT NULL,
            attempt      integer NOT NULL,
            attempted_at timestamptz NOT NULL DEFAULT now(),
            http_status  integer,
            error        text,
            duration_ms  integer NOT NULL,
            PRIMARY KEY (endpoint_id, entry_id, attempt)
        );

        -- Finance facts per purchase for reconciliation and metrics: the grant (R10 flags, what was
        -- granted and cut) with Apple's price, currency and transactionReason from dedupe's merged facts.
        -- A renewal is what Apple calls one; without V2 facts, a period that starts within a day of the
        -- end of an earlier, uncut (or refunded) period of the same subscription and group.
        CREATE VIEW finance_transactions AS
        SELECT g.subscription_key, g.purchase_id, g.user_id, g.group_id, g.product_id, g.product_kind, g.transaction_id,
               coalesce(g.environment, 'Production') AS environment, g.purchase_ms, g.expires_ms, g.cancellation_ms,
               g.cut_kind, g.is_trial, g.is_intro, g.promotional_offer_id, g.offer_code_ref_name, g.offer_type,
               g.offer_identifier, g.offer_discount_type, g.granted_start_ms, g.granted_end_ms,
               (p.state->'facts'->>'price')::bigint AS price_milli, p.state->'facts'->>'currency' AS currency,
               p.state->'facts'->>'transactionReason' AS transaction_reason,
               (g.grant_facts->>'durationDays')::integer AS duration_days,
               CASE WHEN g.product_kind IS DISTINCT FROM 'auto-renewable' THEN false
                    WHEN p.state->'facts'->>'transactionReason' IS NOT NULL THEN p.state->'facts'->>'transactionReason' = 'RENEWAL'
                    ELSE EXISTS (
                        SELECT 1 FROM grants e
                        WHERE e.subscription_key = g.subscription_key AND e.group_id = g.group_id AND e.purchase_id <> g.purchase_id
                          AND e.product_kind = 'auto-renewable' AND e.purchase_ms < g.purchase_ms
                          AND e.expires_ms BETWEEN g.purchase_ms - 86400000 AND g.purchase_ms + 86400000
                          AND (e.cut_kind IS NULL OR e.cut_kind IN ('refund', 'revoke')))
               END AS is_renewal
        FROM grants g
        LEFT JOIN purchases p ON p.subscription_key = g.subscription_key AND p.purchase_id = g.purchase_id;
        """),
        Migration(version: 7, name: "one ledger entry per command and change", sql: """
        -- Issue 9: a command applied again (a redelivery) must write nothing; should a bug ever make it
        -- write the same change twice, the batch is refused (23505 -> dead letter with provenance)
        -- instead of granting twice. The reason is part of it: a replay's compensation names the code
        -- version that wrote it, so fixing a rule, breaking it and fixing it again stays possible.
        -- Leads with the distribution key, as every unique index must.
        CREATE UNIQUE INDEX ledger_once ON ledger (subscription_key, command_id, kind, purchase_id, group_id,
                                                   interval_start_ms, interval_end_ms, amount, cut_kind, md5(reason))
            NULLS NOT DISTINCT;
        """),
        Migration(version: 8, name: "replay horizons", sql: """
        -- Replay (issue 13): a replay republishes the corrected derivation of the subscriptions it
        -- corrected to the topics after the replayed stage. Their older records there are superseded:
        -- per topic, the high watermark of each partition (a JSON array by partition) before the
        -- replay published; later replays ignore a subscription's records below it.
        CREATE TABLE replay_horizons (
            subscription_key text NOT NULL,
            topic            text NOT NULL,
            partition_highs  jsonb NOT NULL,
            stage            text NOT NULL,
            code_version     text NOT NULL,
            replayed_at      timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (subscription_key, topic)
        );
        """),
        Migration(version: 9, name: "no projection without a reader", sql: """
        -- Issue 10: every table and column has a reader or goes. `membership` (a subscription's intervals per
        -- group) was written and never read: GET /v1/subscriptions/{id} computes the groups from the state, and
        -- its `view` column was never written. `grants.original_transaction_id` and `subscriptions.environment`
        -- copied what the subscription key and state already say, and nothing read them.
        DROP TABLE membership;
        ALTER TABLE grants DROP COLUMN original_transaction_id;
        ALTER TABLE subscriptions DROP COLUMN environment;
        """),
        Migration(version: 10, name: "subscription states as json", sql: """
        -- Issue 14: membership writes every state it changes (~3.5 kB of JSON) and reads it back whole on the
        -- next batch (`state::text`). As jsonb each write parsed the document into a tree and each read
        -- printed it again; json keeps the checked text, so both are a copy. Nothing queries these states
        -- field by field on a hot path (the churn report reads one member per subscription).
        -- Rewrites the table once.
        ALTER TABLE subscriptions ALTER COLUMN state TYPE json USING state::json;
        """),
        Migration(version: 11, name: "outbox pages with room for the relay's updates, states compressed with lz4", sql: """
        -- Issue 14: the relay updates each outbox row twice (its order, then published). At fillfactor 100
        -- each new version lands on another page and is logged whole (~1.4 kB each: 2.8 kB of WAL per event
        -- beside the insert's 1.3 kB); with half of each page free it stays on its page, where PostgreSQL
        -- logs only the bytes that changed (~0.3 kB). Applies to pages written from now on; no rewrite.
        ALTER TABLE membership_outbox SET (fillfactor = 50);
        -- Purchases (merged again at each sighting: ~1.8 updates per row under mixed traffic), states and
        -- grants change only columns no index holds, so an update can stay on its page without new index
        -- entries (HOT) when the page has room; at fillfactor 100 only about half of them found it.
        ALTER TABLE purchases SET (fillfactor = 80);
        ALTER TABLE subscriptions SET (fillfactor = 80);
        ALTER TABLE grants SET (fillfactor = 85);
        -- Every state written (~3 kB of json) is compressed; lz4 takes a third to a half of pglz's time for
        -- ~10 % more bytes. Applies to values written from now on. A server built without lz4 keeps pglz.
        DO $$
        BEGIN
            ALTER TABLE subscriptions ALTER COLUMN state SET COMPRESSION lz4;
        EXCEPTION WHEN feature_not_supported THEN
            RAISE NOTICE 'this PostgreSQL has no lz4: subscription states stay compressed with pglz';
        END $$;
        """),
        Migration(version: 12, name: "the ledger's change identity as one digest", sql: """
        -- Issue 14: migration 7's ledger_once held ten columns and md5(reason) per entry (~320 bytes of index,
        -- a fifth of the ledger insert's cost). The same identity is now one SHA-256 of those fields, written by
        -- the membership stage with each entry (`LedgerRow.changeKey`, the same encoding as below: the fields
        -- joined by '|', a text as its UTF-8 length, ':' and itself, a number in decimal, NULL as '-'). Entries
        -- written before get theirs here (every ledger row is rewritten once). A change written twice by one
        -- command is still refused (23505). The column stays nullable so that a membership worker of the
        -- previous release, still running during an upgrade, keeps writing (without this check) rather than
        -- failing every insert; this text is frozen like every applied migration.
        DROP INDEX ledger_once;
        ALTER TABLE ledger ADD COLUMN change_key bytea;
        UPDATE ledger SET change_key = sha256(convert_to(concat_ws('|',
            coalesce(length(convert_to(command_id, 'UTF8')) || ':' || command_id, '-'),
            coalesce(length(convert_to(kind, 'UTF8')) || ':' || kind, '-'),
            coalesce(length(convert_to(purchase_id, 'UTF8')) || ':' || purchase_id, '-'),
            coalesce(length(convert_to(group_id, 'UTF8')) || ':' || group_id, '-'),
            coalesce(interval_start_ms::text, '-'),
            coalesce(interval_end_ms::text, '-'),
            coalesce(amount::text, '-'),
            coalesce(length(convert_to(cut_kind, 'UTF8')) || ':' || cut_kind, '-'),
            coalesce(length(convert_to(reason, 'UTF8')) || ':' || reason, '-')), 'UTF8'));
        CREATE UNIQUE INDEX ledger_change ON ledger (subscription_key, change_key);
        """),
        Migration(version: 13, name: "transaction ids looked up across subscriptions", sql: """
        -- The offer signature endpoint (a transaction id's owners, R9) and support's search look a transaction id up
        -- in every subscription; the key (subscription_key, transaction_id) cannot serve that, so each request read
        -- the whole table, which grows by a row per purchase. Not unique: an id may be known to several
        -- subscriptions (R1 aliases). Built while the table is locked for writes (no CONCURRENTLY in a migration's
        -- transaction): on a large table, run it in a quiet hour.
        CREATE INDEX transaction_aliases_transaction ON transaction_aliases (transaction_id);
        """),
        Migration(version: 14, name: "the relay's published mark without index entries", sql: """
        -- Issue 14: marking an outbox row published changed a column of an index's predicate
        -- (membership_outbox_unpublished, WHERE published_at IS NULL), so PostgreSQL could not update it in place
        -- (HOT): each mark wrote the whole ~1 kB row again with new entries in every index, ~40 µs and ~2 kB of
        -- WAL per event at 1,000 events/s. The relay's reads now find their rows without that predicate: rows
        -- still to order through an index of unordered rows, rows to publish from a watermark below which every
        -- ordered row is published. Setting published_at then touches no index and stays on the page.
        -- The old index goes first, so the migration takes the table's strongest lock at once instead of
        -- upgrading a lock mid-way (a relay's transaction interleaved with an upgrade deadlocks). Writes to the
        -- outbox wait while the new index builds: on a large outbox, run it in a quiet hour. Replace the relay of
        -- the previous release right after: without the dropped index its reads scan the outbox.
        DROP INDEX membership_outbox_unpublished;
        CREATE INDEX membership_outbox_unordered ON membership_outbox (entry_id) WHERE relay_seq IS NULL;
        CREATE TABLE membership_relay_progress (
            singleton         boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            published_through bigint NOT NULL      -- every ordered row with relay_seq <= this is published
        );
        INSERT INTO membership_relay_progress (published_through)
        SELECT coalesce((SELECT min(relay_seq) - 1 FROM membership_outbox WHERE published_at IS NULL AND relay_seq IS NOT NULL),
                        (SELECT max(relay_seq) FROM membership_outbox), 0);
        """),
        Migration(version: 15, name: "purchases and grant facts as json", sql: """
        -- Issue 14: every purchase dedupe merges and every grant membership changes is written again whole as
        -- a JSON document StoreLedger made itself (`purchases.state`, `grants.grant_facts`: ~0.8 of each per
        -- event), and dedupe reads a subscription's purchases back whole per batch. As jsonb each was parsed
        -- into a tree on the way in (jsonb_recv: with the ledger's documents a fifth of PostgreSQL's CPU in
        -- `bench pipeline`) and printed again on every read; json keeps the checked text. The finance view
        -- reads fields of both with `->`/`->>`, which json has too. The ledger's and the per-user view's
        -- documents stay jsonb: operators compare, group and edit those in SQL, which json cannot.
        -- Both types cast to each other on assignment, so a worker of the previous release keeps writing
        -- during an upgrade. The finance view depends on both columns: it is dropped and created again from
        -- its own stored definition. Rewrites the two tables once: on a large database, run it in a quiet hour.
        DO $$
        DECLARE
            finance_view text := pg_get_viewdef('finance_transactions'::regclass);
        BEGIN
            DROP VIEW finance_transactions;
            ALTER TABLE purchases ALTER COLUMN state TYPE json USING state::json;
            ALTER TABLE grants ALTER COLUMN grant_facts TYPE json USING grant_facts::json;
            EXECUTE 'CREATE VIEW finance_transactions AS ' || finance_view;
        END $$;
        """),
        Migration(version: 16, name: "outbox rows without a second copy of their ledger entry", sql: """
        -- Issue 14: an outbox row held its event as JSON (~1 kB), most of it a copy of the ledger entry written
        -- in the same transaction, and the relay's two marks rewrote it twice more. New rows keep only what the
        -- event says beyond its entry (`details`, a few dozen bytes); the relay and webhook deliverers rebuild
        -- the same bytes from them and the ledger row. Rows written before keep their payload and go out as
        -- they are. A relay or deliverer of the previous release cannot read the new rows: upgrade them with
        -- or before the membership workers. NOT VALID: the rows already there all have a payload, and checking
        -- them would hold the table's lock for a scan.
        ALTER TABLE membership_outbox ALTER COLUMN payload DROP NOT NULL;
        ALTER TABLE membership_outbox ADD COLUMN details bytea;
        ALTER TABLE membership_outbox ADD CONSTRAINT membership_outbox_event CHECK (payload IS NOT NULL OR details IS NOT NULL) NOT VALID;
        """),
    ]
}
