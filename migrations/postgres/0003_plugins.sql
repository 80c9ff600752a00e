-- Plugins and pipelines (see ../0003_plugins.sql).
CREATE TABLE plugins (
    name         TEXT    NOT NULL,
    version      TEXT    NOT NULL,
    kind         TEXT    NOT NULL CHECK (kind IN ('pre', 'post')),
    sha256       TEXT    NOT NULL,
    size_bytes   BIGINT  NOT NULL,
    description  TEXT    NOT NULL,
    limits       TEXT    NOT NULL DEFAULT '{}',
    created_at   BIGINT  NOT NULL,
    -- Upload order within a second: SQLite's implicit rowid, which the store's queries order
    -- by ("the newest upload of a name"), made explicit under the same name.
    rowid        BIGINT  GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (name, version)
);
CREATE INDEX plugins_sha256 ON plugins (sha256);

CREATE TABLE pipelines (
    name         TEXT    NOT NULL PRIMARY KEY,
    spec         TEXT    NOT NULL,
    created_at   BIGINT  NOT NULL,
    updated_at   BIGINT  NOT NULL
);

CREATE TABLE pipeline_plugins (
    pipeline     TEXT    NOT NULL REFERENCES pipelines (name) ON DELETE CASCADE,
    plugin       TEXT    NOT NULL,
    version      TEXT    NOT NULL,
    PRIMARY KEY (pipeline, plugin, version)
);
