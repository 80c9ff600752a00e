-- WebAssembly plugins. The component lives content-addressed under the data directory
-- (plugins/<sha256>.wasm); description is the JSON of what its `describe` export returned when it
-- was uploaded (name, version, kind, consumes, produces). (name, version) come from `describe`.
CREATE TABLE plugins (
    name         TEXT    NOT NULL,
    version      TEXT    NOT NULL,
    kind         TEXT    NOT NULL CHECK (kind IN ('pre', 'post')),
    sha256       TEXT    NOT NULL,
    size_bytes   INTEGER NOT NULL,
    description  TEXT    NOT NULL,
    -- Per-call limits overriding the server's [plugins] defaults (JSON; {} = defaults).
    limits       TEXT    NOT NULL DEFAULT '{}',
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE INDEX plugins_sha256 ON plugins (sha256);

-- Pipelines: pre-plugins -> model (with native pre/post-ops) -> post-plugins, as a JSON spec.
-- Plugins are referenced by name (newest upload) or name@version; the spec is resolved per
-- request, so uploading a new plugin version takes effect for new requests without a restart.
CREATE TABLE pipelines (
    name         TEXT    NOT NULL PRIMARY KEY,
    spec         TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);

-- Which plugins a pipeline uses, so the version a pipeline runs cannot be deleted: `version` is
-- the pinned version, or '' for "the newest upload of this name".
CREATE TABLE pipeline_plugins (
    pipeline     TEXT    NOT NULL REFERENCES pipelines (name) ON DELETE CASCADE,
    plugin       TEXT    NOT NULL,
    version      TEXT    NOT NULL,
    PRIMARY KEY (pipeline, plugin, version)
);
