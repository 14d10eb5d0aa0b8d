-- Version 4: sessions and cut-offs (app/backends/sqlite/tables.py says what each session
-- column holds; every token of a family carries its family's). A token from before
-- becomes a session of a new random id (one per family), logged in at its family's first
-- issue, its client unknown, last used at the upgrade: its real last use was never kept,
-- and an idle timeout turned on with the upgrade must not end the sessions in use.
ALTER TABLE refresh_tokens
    ADD COLUMN IF NOT EXISTS session text COLLATE "C",
    ADD COLUMN IF NOT EXISTS logged_in_at bigint,
    ADD COLUMN IF NOT EXISTS last_used_at bigint,
    ADD COLUMN IF NOT EXISTS address text,
    ADD COLUMN IF NOT EXISTS user_agent text;
WITH family AS MATERIALIZED (  -- one id per family, drawn once
    SELECT coalesce(family, digest) AS key, min(issued_at) AS first,
           replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '') AS id
    FROM refresh_tokens WHERE session IS NULL GROUP BY coalesce(family, digest))
UPDATE refresh_tokens AS token
    SET session = family.id, logged_in_at = family.first,
        last_used_at = floor(extract(epoch FROM now()) / 60)::bigint * 60,
        address = '', user_agent = ''
    FROM family
    WHERE token.session IS NULL AND coalesce(token.family, token.digest) = family.key;
-- A user's live sessions, newest login first, ties by id: sessions_of's keyset pages and
-- log_out_everywhere read one user's entries only, however many tokens others hold.
CREATE INDEX IF NOT EXISTS refresh_tokens_by_session
    ON refresh_tokens (username, logged_in_at DESC, session) WHERE retired_at IS NULL;
-- Each user's cut-off: access tokens issued at or before it are refused.
CREATE TABLE IF NOT EXISTS cutoffs (
    username text COLLATE "C" PRIMARY KEY,
    at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS cutoffs_by_time ON cutoffs (at);
