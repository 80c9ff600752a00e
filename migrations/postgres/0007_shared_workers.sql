-- Workers across gateway replicas (issue 15): every replica on this store is the same manager to
-- the workers. PostgreSQL only: one SQLite process keeps the cluster's secrets in files under
-- its data directory and what heartbeats report in memory.

-- The cluster's CA and the Ed25519 key that signs direct-mode tokens: one row, made by the first
-- replica that starts (INSERT ... ON CONFLICT DO NOTHING, so replicas starting together keep one)
-- and loaded by every other, so that a worker's certificate, the manager's pin in join secrets
-- and direct tokens are the same whichever replica made them. Anyone who can read this table
-- can mint worker certificates: grant it to the gateway's role only.
CREATE TABLE cluster_material (
    name         TEXT    NOT NULL PRIMARY KEY,
    ca_cert_pem  TEXT    NOT NULL,
    ca_key_pem   TEXT    NOT NULL,
    -- PKCS#8 of the token signing key.
    token_key    BYTEA   NOT NULL,
    created_at   BIGINT  NOT NULL
);

-- Revisions of worker_status rows: one sequence for the whole table, so a row deleted and made
-- again (a worker deregistered, then joined) still moves forward.
CREATE SEQUENCE worker_status_revision;

-- What each live worker last reported, to whichever replica its heartbeat went. Every replica
-- reads the whole table each heartbeat interval into its in-memory registry and routes from
-- there. last_seen is stamped with the database's clock and read back as an age on the same
-- clock, so replicas whose clocks disagree judge liveness alike.
CREATE TABLE worker_status (
    worker_id  TEXT         NOT NULL PRIMARY KEY REFERENCES workers (id) ON DELETE CASCADE,
    -- JSON of the last heartbeat (infergate_cluster::messages::Report): loaded models, load,
    -- and the state the worker reports (ready or draining).
    report     TEXT         NOT NULL,
    -- An operator drained it (on any replica); a new join clears it.
    drained    BOOLEAN      NOT NULL DEFAULT FALSE,
    revision   BIGINT       NOT NULL,
    last_seen  TIMESTAMPTZ  NOT NULL
);
