-- Version 3: the lineage of a rotated family (app/backends/sqlite/tables.py says what the
-- column holds), by which a token the family forgot is still known as its own; and
-- sql/functions.sql again, whose functions now run with a fixed search_path. A partial
-- index: a token without lineage (a login, SPEC.md's defaults) adds nothing to it.
ALTER TABLE refresh_tokens ADD COLUMN IF NOT EXISTS lineage text COLLATE "C";
CREATE INDEX IF NOT EXISTS refresh_tokens_by_lineage
    ON refresh_tokens (lineage) WHERE lineage IS NOT NULL;
