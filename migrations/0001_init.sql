-- API keys: only a SHA-256 of the secret is kept; public_id is the short lookup prefix.
CREATE TABLE api_keys (
    id           INTEGER PRIMARY KEY,
    public_id    TEXT    NOT NULL UNIQUE,
    name         TEXT    NOT NULL,
    secret_hash  BLOB    NOT NULL,
    scopes       TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);

-- Model versions. The file lives content-addressed under the data directory (models/<sha256>.onnx);
-- signature is the JSON of inputs/outputs read by ONNX Runtime when the version was uploaded.
CREATE TABLE model_versions (
    name         TEXT    NOT NULL,
    version      INTEGER NOT NULL,
    sha256       TEXT    NOT NULL,
    size_bytes   INTEGER NOT NULL,
    signature    TEXT    NOT NULL,
    config       TEXT    NOT NULL DEFAULT '{}',
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE INDEX model_versions_sha256 ON model_versions (sha256);
