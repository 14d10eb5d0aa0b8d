-- Version 2: rotation, the per-user limit and the lifetime (the columns the SQLite store
-- has, app/backends/sqlite/tables.py says what each holds), the deny entries of logged-out
-- cookie tokens, and the rate limits' counters. Partial indexes: a token without expiry
-- or family (SPEC.md's defaults) adds nothing to them.
ALTER TABLE refresh_tokens
    ADD COLUMN IF NOT EXISTS expires_at bigint,
    ADD COLUMN IF NOT EXISTS family     text COLLATE "C",
    ADD COLUMN IF NOT EXISTS generation integer,
    ADD COLUMN IF NOT EXISTS retired_at double precision,
    ADD COLUMN IF NOT EXISTS parent     text COLLATE "C",
    ADD COLUMN IF NOT EXISTS sequence   bigint;
-- the order of issue under a limit or a lifetime: same-second tokens told apart exactly
CREATE SEQUENCE IF NOT EXISTS refresh_tokens_sequence;
CREATE INDEX IF NOT EXISTS refresh_tokens_by_expiry
    ON refresh_tokens (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS refresh_tokens_by_family
    ON refresh_tokens (family, generation) WHERE family IS NOT NULL;
CREATE TABLE IF NOT EXISTS denied_tokens (
    digest     text COLLATE "C" PRIMARY KEY,
    expires_at double precision NOT NULL
);
CREATE INDEX IF NOT EXISTS denied_tokens_by_expiry ON denied_tokens (expires_at);
-- counters are not precious: unlogged (no WAL; emptied by a crash of the server)
CREATE UNLOGGED TABLE IF NOT EXISTS rate_limits (
    key        text COLLATE "C" PRIMARY KEY,
    hits       integer NOT NULL,
    expires_at double precision NOT NULL
);
