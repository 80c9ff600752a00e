-- Chat guardrails are uploaded as plugins (POST /api/plugins) and told apart by the world their
-- component implements: the plugins' kind may now be 'guardrail'. SQLite cannot change a CHECK
-- constraint, so the table is rebuilt with the same rows and rowids (the rowid orders uploads:
-- "the newest upload of a name"). No other table references it.
CREATE TABLE plugins_new (
    name         TEXT    NOT NULL,
    version      TEXT    NOT NULL,
    kind         TEXT    NOT NULL CHECK (kind IN ('pre', 'post', 'guardrail')),
    sha256       TEXT    NOT NULL,
    size_bytes   INTEGER NOT NULL,
    description  TEXT    NOT NULL,
    limits       TEXT    NOT NULL DEFAULT '{}',
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (name, version)
);
INSERT INTO plugins_new (rowid, name, version, kind, sha256, size_bytes, description, limits, created_at)
    SELECT rowid, name, version, kind, sha256, size_bytes, description, limits, created_at FROM plugins;
DROP TABLE plugins;
ALTER TABLE plugins_new RENAME TO plugins;
CREATE INDEX plugins_sha256 ON plugins (sha256);
