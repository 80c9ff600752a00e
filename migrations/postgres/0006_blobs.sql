-- Model and plugin files in the shared database, so that replicas need no shared volume
-- (gateway/src/store/blobs.rs). One row per content address, its bytes in 1 MiB chunks written
-- in the transaction that inserts the first row referencing it, deleted in the one that deletes
-- the last. Each replica's data directory keeps a checked copy as a cache.
CREATE TABLE blobs (
    sha256      TEXT    NOT NULL PRIMARY KEY,
    size_bytes  BIGINT  NOT NULL,
    chunks      INTEGER NOT NULL,
    created_at  BIGINT  NOT NULL
);

CREATE TABLE blob_chunks (
    sha256  TEXT    NOT NULL REFERENCES blobs (sha256) ON DELETE CASCADE,
    n       INTEGER NOT NULL,
    data    BYTEA   NOT NULL,
    PRIMARY KEY (sha256, n)
);
-- Model and plugin files compress poorly: stored out of line without trying to.
ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
