-- The PostgreSQL store's operations that read and change several rows, each one call
-- (one round trip), created with the schema and replaced at each upgrade.
--
-- Times come from the service (its host's clock), as with the other stores: p_now is
-- seconds since the epoch; whole-second columns (issued_at, expires_at) compare with its
-- floor. Every change to a user's families (rotation, a revoke, an eviction under the
-- limit, revoke-user) takes that user's advisory lock first, and each statement after it
-- reads afresh (READ COMMITTED, a volatile function): concurrent calls about one user
-- run one after the other, whichever host or worker makes them. Each function runs with
-- a search_path of its own schema only (the end of this file sets it).

-- Forget up to p_limit expired tokens, found through the expiry index; rows another call
-- is changing are left to it.
-- (MATERIALIZED: the batch is chosen once; a LIMIT in a subquery that the plan scans
-- again could choose other rows, and delete more than p_limit.)
CREATE OR REPLACE FUNCTION token_store_purge(p_now double precision, p_limit integer)
RETURNS integer LANGUAGE sql AS $$
    WITH due AS MATERIALIZED (
        SELECT digest FROM refresh_tokens WHERE expires_at <= floor(p_now)::bigint
        LIMIT p_limit FOR UPDATE SKIP LOCKED),
    purged AS (
        DELETE FROM refresh_tokens USING due WHERE refresh_tokens.digest = due.digest
        RETURNING 1)
    SELECT count(*)::integer FROM purged
$$;

-- Serialize every change to p_username's tokens until the end of the transaction.
CREATE OR REPLACE FUNCTION token_store_lock_user(p_username text)
RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtext('token_store_user'), hashtext(p_username))
$$;

-- Forget a live token, and with it its family's retired tokens.
CREATE OR REPLACE FUNCTION token_store_forget_live(p_digest text, p_family text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_family IS NULL THEN
        DELETE FROM refresh_tokens WHERE digest = p_digest;
    ELSE
        DELETE FROM refresh_tokens WHERE family = p_family;
    END IF;
END $$;

-- Issue under a lifetime (p_expires_at) or a per-user limit (p_per_user > 0): purge a
-- batch of expired tokens, forget the user's oldest live tokens beyond the limit, insert
-- the token as a new session (p_session, its client p_address and p_user_agent); cutoff:
-- the user's cut-off, or NULL; ended: how many of the user's sessions the limit ended.
CREATE OR REPLACE FUNCTION token_store_login(
    p_digest text, p_username text, p_now double precision, p_expires_at bigint,
    p_per_user integer, p_batch integer, p_session text, p_address text, p_user_agent text,
    OUT cutoff bigint, OUT ended integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := floor(p_now);
    v_excess bigint;
    v_live record;
BEGIN
    ended := 0;
    IF p_expires_at IS NOT NULL THEN
        PERFORM token_store_purge(p_now, p_batch);
    END IF;
    IF p_per_user > 0 THEN
        PERFORM token_store_lock_user(p_username);
        SELECT count(*) - p_per_user + 1 INTO v_excess FROM refresh_tokens
            WHERE username = p_username AND retired_at IS NULL
            AND (expires_at IS NULL OR expires_at > v_now);
        FOR v_live IN
            SELECT digest, family FROM refresh_tokens
            WHERE username = p_username AND retired_at IS NULL
            AND (expires_at IS NULL OR expires_at > v_now)
            ORDER BY issued_at, sequence NULLS FIRST, digest  -- same-second: order of issue
            LIMIT greatest(v_excess, 0)
        LOOP
            PERFORM token_store_forget_live(v_live.digest, v_live.family);
            ended := ended + 1;
        END LOOP;
    END IF;
    INSERT INTO refresh_tokens (digest, username, issued_at, expires_at, sequence, session,
                                logged_in_at, last_used_at, address, user_agent)
        VALUES (p_digest, p_username, v_now, p_expires_at, nextval('refresh_tokens_sequence'),
                p_session, v_now, v_now - v_now % 60, p_address, p_user_agent);
    cutoff := (SELECT at FROM cutoffs WHERE username = p_username);
END $$;

-- A new session's id, for the calls of an older version that name none.
CREATE OR REPLACE FUNCTION token_store_new_session()
RETURNS text LANGUAGE sql AS $$
    SELECT replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '')
$$;

-- End p_username's live session p_session: forget its family; whether it was found.
-- p_idle_since: a session last used then or before is idle: forgotten too, and false (it
-- was over, and unlisted); NULL: no idle timeout.
CREATE OR REPLACE FUNCTION token_store_end_session(
    p_username text, p_session text, p_now double precision, p_idle_since bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_token record;
BEGIN
    PERFORM token_store_lock_user(p_username);
    SELECT digest, family, last_used_at INTO v_token FROM refresh_tokens
        WHERE username = p_username AND retired_at IS NULL AND session = p_session
        AND (expires_at IS NULL OR expires_at > floor(p_now)::bigint) LIMIT 1;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM token_store_forget_live(v_token.digest, v_token.family);
    RETURN NOT coalesce(v_token.last_used_at <= p_idle_since, false);
END $$;

-- Log p_username out everywhere as of p_at (RefreshTokenStore.log_out_everywhere): forget
-- every session begun by then and raise the cut-off, unless it is p_at or later already;
-- how many live sessions ended.
CREATE OR REPLACE FUNCTION token_store_log_out_everywhere(
    p_username text, p_at bigint, p_now double precision)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_count integer := 0;
    v_token record;
BEGIN
    PERFORM token_store_lock_user(p_username);
    IF EXISTS (SELECT 1 FROM cutoffs WHERE username = p_username AND at >= p_at) THEN
        RETURN 0;  -- done already: a login since then stays
    END IF;
    FOR v_token IN
        SELECT digest, family, expires_at FROM refresh_tokens
        -- a token written by a host still on schema 3 (a rolling upgrade) has no login
        -- time: its own issue time stands for it
        WHERE username = p_username AND retired_at IS NULL
            AND coalesce(logged_in_at, issued_at) <= p_at
    LOOP
        PERFORM token_store_forget_live(v_token.digest, v_token.family);
        IF v_token.expires_at IS NULL OR v_token.expires_at > floor(p_now)::bigint THEN
            v_count := v_count + 1;
        END IF;
    END LOOP;
    INSERT INTO cutoffs (username, at) VALUES (p_username, p_at)
        ON CONFLICT (username) DO UPDATE SET at = greatest(cutoffs.at, excluded.at);
    RETURN v_count;
END $$;

-- Rotate p_digest into p_successor (RefreshTokenStore.rotate): outcome is rotated,
-- retried, reused, unknown, other_user or p_idle_outcome; family_digest the family's
-- first digest; owner the token's, when rotated, retried, reused or idle. p_username
-- NULL takes the token's owner, whoever (the OAuth refresh grant names no user).
-- p_lineage: the digest of the token's lineage (NULL for none); a token whose digest is
-- unknown but whose lineage names a live family is one the family forgot: reuse.
-- p_idle_since: a live token of a session last used then or before is idle, and its
-- family is forgotten (outcome p_idle_outcome, 'idle'); NULL: no idle timeout. The
-- successor carries the session, used now (to the minute).
CREATE OR REPLACE FUNCTION token_store_rotate(
    p_digest text, p_successor text, p_username text, p_now double precision,
    p_lifetime bigint, p_grace double precision, p_kept integer, p_batch integer,
    p_numbered boolean, p_lineage text, p_idle_since bigint, p_idle_outcome text,
    OUT outcome text, OUT family_digest text, OUT owner text)
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := floor(p_now);
    v_owner text;
    v_token refresh_tokens%ROWTYPE;
    v_family text;
    v_generation integer;
    v_expires bigint;
    v_unused text;
BEGIN
    outcome := 'unknown';
    family_digest := '';
    owner := '';
    IF p_lifetime IS NOT NULL THEN
        PERFORM token_store_purge(p_now, p_batch);
    END IF;
    SELECT username INTO v_owner FROM refresh_tokens WHERE digest = p_digest;
    IF NOT FOUND THEN
        SELECT username, family INTO v_owner, v_family FROM refresh_tokens
            WHERE lineage = p_lineage AND (expires_at IS NULL OR expires_at > v_now) LIMIT 1;
        IF NOT FOUND THEN
            RETURN;
        ELSIF v_owner <> coalesce(p_username, v_owner) THEN
            outcome := 'other_user';
            RETURN;
        END IF;
        PERFORM token_store_lock_user(v_owner);
        DELETE FROM refresh_tokens WHERE family = v_family;
        IF FOUND THEN  -- else another call ended the family meanwhile
            outcome := 'reused';
            family_digest := v_family;
            owner := v_owner;
        END IF;
        RETURN;
    END IF;
    PERFORM token_store_lock_user(v_owner);
    SELECT * INTO v_token FROM refresh_tokens WHERE digest = p_digest FOR UPDATE;
    IF NOT FOUND OR v_now >= v_token.expires_at THEN
        RETURN;
    END IF;
    IF v_token.username <> coalesce(p_username, v_token.username) THEN
        outcome := 'other_user';
        RETURN;
    END IF;
    IF v_token.retired_at IS NULL AND v_token.last_used_at <= p_idle_since THEN
        PERFORM token_store_forget_live(v_token.digest, v_token.family);
        outcome := p_idle_outcome;
        owner := v_token.username;
        RETURN;
    END IF;
    v_family := coalesce(v_token.family, v_token.digest);
    v_generation := coalesce(v_token.generation, 0);
    family_digest := v_family;
    owner := v_token.username;
    IF v_token.retired_at IS NULL THEN
        outcome := 'rotated';
        -- the lineage goes with the live token: one row per family carries it
        UPDATE refresh_tokens
            SET retired_at = p_now, family = v_family, generation = v_generation, lineage = NULL
            WHERE digest = p_digest;
    ELSE
        -- no grace, no retry; within it, this token's own successor, if nothing rotated
        -- or replaced it yet (a sibling's successor is not its to retry)
        IF p_grace > 0 AND p_now < v_token.retired_at + p_grace THEN
            SELECT digest INTO v_unused FROM refresh_tokens
                WHERE family = v_family AND generation = v_generation + 1
                AND parent = p_digest AND retired_at IS NULL;
        END IF;
        IF v_unused IS NULL THEN
            DELETE FROM refresh_tokens WHERE family = v_family;
            outcome := 'reused';
            RETURN;
        END IF;
        outcome := 'retried';
        -- retired, not forgotten: whoever presents it later revokes the family
        UPDATE refresh_tokens SET retired_at = p_now, lineage = NULL WHERE digest = v_unused;
    END IF;
    v_expires := v_token.expires_at;
    IF v_expires IS NULL AND p_lifetime IS NOT NULL THEN  -- a family older than the setting
        v_expires := v_now + p_lifetime;
        UPDATE refresh_tokens SET expires_at = v_expires WHERE family = v_family;
    END IF;
    INSERT INTO refresh_tokens
        (digest, username, issued_at, expires_at, family, generation, parent, lineage, sequence,
         session, logged_in_at, last_used_at, address, user_agent)
        VALUES (p_successor, v_token.username, v_now, v_expires, v_family, v_generation + 1,
                p_digest, coalesce(v_token.lineage, p_lineage),
                CASE WHEN p_numbered THEN nextval('refresh_tokens_sequence') END,
                coalesce(v_token.session, token_store_new_session()),
                coalesce(v_token.logged_in_at, v_now), v_now - v_now % 60,
                coalesce(v_token.address, ''), coalesce(v_token.user_agent, ''));
    DELETE FROM refresh_tokens WHERE family = v_family AND generation < v_generation + 1 - p_kept;
END $$;

-- Forget one token and its whole family (RefreshTokenStore.revoke): known, whether a
-- token or a family was forgotten; reused, whether it was a retired member, or one the
-- family forgot (p_lineage, as in token_store_rotate); family_digest ('' for none) and
-- owner, the family's.
CREATE OR REPLACE FUNCTION token_store_revoke(
    p_digest text, p_lineage text, p_now double precision,
    OUT known boolean, OUT reused boolean, OUT family_digest text, OUT owner text)
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := floor(p_now);
    v_owner text;
    v_family text;
    v_retired double precision;
    v_expires bigint;
BEGIN
    known := false;
    reused := false;
    family_digest := '';
    owner := '';
    SELECT username INTO v_owner FROM refresh_tokens WHERE digest = p_digest;
    IF FOUND THEN
        PERFORM token_store_lock_user(v_owner);
        DELETE FROM refresh_tokens WHERE digest = p_digest
            RETURNING family, retired_at, expires_at INTO v_family, v_retired, v_expires;
        IF NOT FOUND THEN  -- another call forgot it meanwhile
            RETURN;
        END IF;
        known := true;
        owner := v_owner;
        IF v_family IS NOT NULL THEN
            DELETE FROM refresh_tokens WHERE family = v_family;
            family_digest := v_family;
            reused := v_retired IS NOT NULL AND (v_expires IS NULL OR v_expires > v_now);
        END IF;
        RETURN;
    END IF;
    SELECT username, family INTO v_owner, v_family FROM refresh_tokens
        WHERE lineage = p_lineage AND (expires_at IS NULL OR expires_at > v_now) LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM token_store_lock_user(v_owner);
    DELETE FROM refresh_tokens WHERE family = v_family;
    IF FOUND THEN
        known := true;
        reused := true;
        family_digest := v_family;
        owner := v_owner;
    END IF;
END $$;

-- Forget every token of p_username; how many were live.
CREATE OR REPLACE FUNCTION token_store_revoke_all(p_username text, p_now double precision)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_count integer;
BEGIN
    PERFORM token_store_lock_user(p_username);
    WITH gone AS (
        DELETE FROM refresh_tokens WHERE username = p_username RETURNING retired_at, expires_at)
    SELECT count(*) FILTER (WHERE retired_at IS NULL
                            AND (expires_at IS NULL OR expires_at > floor(p_now)::bigint))
        INTO v_count FROM gone;
    RETURN v_count;
END $$;

-- Forget the one live token whose digest starts with p_prefix (lowercase hex); 1 or 0.
CREATE OR REPLACE FUNCTION token_store_revoke_prefix(p_prefix text, p_now double precision)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := floor(p_now);
    v_found text[];
    v_token refresh_tokens%ROWTYPE;
BEGIN
    SELECT array_agg(digest) INTO v_found FROM (
        SELECT digest FROM refresh_tokens
        WHERE digest >= p_prefix AND digest < (p_prefix || 'g') AND retired_at IS NULL
        AND (expires_at IS NULL OR expires_at > v_now) LIMIT 2) AS matching;
    IF cardinality(v_found) IS DISTINCT FROM 1 THEN
        RETURN 0;
    END IF;
    SELECT * INTO v_token FROM refresh_tokens WHERE digest = v_found[1];
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    PERFORM token_store_lock_user(v_token.username);
    SELECT * INTO v_token FROM refresh_tokens WHERE digest = v_found[1] AND retired_at IS NULL;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    PERFORM token_store_forget_live(v_token.digest, v_token.family);
    RETURN 1;
END $$;

-- The signatures of versions 2 to 4, for a host still running one while the others
-- upgrade: each is this version's function, without what it did not know (version 4
-- knew no outcome 'idle': its idle session is unknown).
CREATE OR REPLACE FUNCTION token_store_issue(
    p_digest text, p_username text, p_now double precision, p_expires_at bigint,
    p_per_user integer, p_batch integer, p_session text, p_address text, p_user_agent text)
RETURNS bigint LANGUAGE sql AS $$
    SELECT cutoff FROM token_store_login(p_digest, p_username, p_now, p_expires_at, p_per_user,
                                         p_batch, p_session, p_address, p_user_agent)
$$;

CREATE OR REPLACE FUNCTION token_store_end_session(
    p_username text, p_session text, p_now double precision)
RETURNS boolean LANGUAGE sql AS $$
    SELECT token_store_end_session(p_username, p_session, p_now, NULL::bigint)
$$;

CREATE OR REPLACE FUNCTION token_store_rotate(
    p_digest text, p_successor text, p_username text, p_now double precision,
    p_lifetime bigint, p_grace double precision, p_kept integer, p_batch integer,
    p_numbered boolean, p_lineage text, p_idle_since bigint,
    OUT outcome text, OUT family_digest text)
LANGUAGE sql AS $$
    SELECT r.outcome, r.family_digest
    FROM token_store_rotate(p_digest, p_successor, p_username, p_now, p_lifetime, p_grace,
                            p_kept, p_batch, p_numbered, p_lineage, p_idle_since, 'unknown') AS r
$$;

CREATE OR REPLACE FUNCTION token_store_issue(
    p_digest text, p_username text, p_now double precision, p_expires_at bigint,
    p_per_user integer, p_batch integer)
RETURNS void LANGUAGE sql AS $$
    SELECT token_store_issue(p_digest, p_username, p_now, p_expires_at, p_per_user, p_batch,
                             token_store_new_session(), '', '')
$$;

CREATE OR REPLACE FUNCTION token_store_rotate(
    p_digest text, p_successor text, p_username text, p_now double precision,
    p_lifetime bigint, p_grace double precision, p_kept integer, p_batch integer,
    p_numbered boolean, p_lineage text, OUT outcome text, OUT family_digest text)
LANGUAGE sql AS $$
    SELECT * FROM token_store_rotate(p_digest, p_successor, p_username, p_now, p_lifetime,
                                     p_grace, p_kept, p_batch, p_numbered, p_lineage,
                                     NULL::bigint)
$$;

CREATE OR REPLACE FUNCTION token_store_rotate(
    p_digest text, p_successor text, p_username text, p_now double precision,
    p_lifetime bigint, p_grace double precision, p_kept integer, p_batch integer,
    p_numbered boolean, OUT outcome text, OUT family_digest text)
LANGUAGE sql AS $$
    SELECT * FROM token_store_rotate(p_digest, p_successor, p_username, p_now, p_lifetime,
                                     p_grace, p_kept, p_batch, p_numbered, NULL::text,
                                     NULL::bigint)
$$;

CREATE OR REPLACE FUNCTION token_store_revoke(p_digest text)
RETURNS boolean LANGUAGE sql AS $$
    SELECT known FROM token_store_revoke(p_digest, NULL::text,
                                         extract(epoch FROM clock_timestamp())::double precision)
$$;

-- Every function above runs with its own schema as search_path, and pg_temp last
-- (pg_catalog, unnamed, is searched first): no table, function or operator that a role
-- makes in another schema of a caller's search_path, or in pg_temp, can stand in for
-- the store's own.
DO $$
DECLARE
    v_schema text := current_schema();
    v_function regprocedure;
BEGIN
    FOR v_function IN
        SELECT oid::regprocedure FROM pg_proc
        WHERE pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = v_schema)
        AND proname LIKE 'token\_store\_%'
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', v_function, v_schema);
    END LOOP;
END $$;
