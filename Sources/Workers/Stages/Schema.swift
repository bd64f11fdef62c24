import Postgres

/// StoreLedger's PostgreSQL schema, as versioned migrations. Every table carries its partition key
/// (the subscription) first in its primary key, so state can later be distributed like the topics.
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
    ]
}
