-- Version 1 of the PostgreSQL store: SPEC.md's refresh tokens (a digest, its username,
-- its issue time), and the schema's version. Both text columns compare bytewise
-- (COLLATE "C"): a digest prefix is a range of the primary key, and a username is
-- matched exactly, whatever the database's locale.
CREATE TABLE IF NOT EXISTS refresh_tokens (
    digest    text COLLATE "C" PRIMARY KEY,
    username  text COLLATE "C" NOT NULL,
    issued_at bigint NOT NULL
);
-- one row: the version its tables are at
CREATE TABLE IF NOT EXISTS token_store_schema (
    version integer NOT NULL
);
