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
    ]
}
