-- Workers on other hosts (issue 14): the durable half of the manager's worker registry. What a
-- worker last reported (load, loaded models, liveness) lives in memory on the manager; what must
-- survive a manager restart (identities, addresses, credentials, removals) lives here, behind the
-- store's interface so that a shared store can hold it for several gateway replicas.

-- Join secrets made by `infergate workers token create`: only the SHA-256 of the secret is kept.
CREATE TABLE join_secrets (
    id             TEXT    NOT NULL PRIMARY KEY,
    secret_sha256  TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    -- Unix seconds after which the secret admits nobody; NULL = until revoked.
    expires_at     INTEGER,
    revoked_at     INTEGER
);

-- Workers that joined. credential_sha256 is the SHA-256 of the worker's own bearer credential
-- (issued at join, replaced at each rejoin). A removed worker keeps its row (removed_at set) so
-- that it cannot rejoin under the same id: an operator's removal sticks until a new identity joins.
CREATE TABLE workers (
    id                 TEXT    NOT NULL PRIMARY KEY,
    advertise          TEXT    NOT NULL,
    version            TEXT    NOT NULL,
    -- JSON of the worker's devices (CPU model, cores, RAM, GPUs).
    devices            TEXT    NOT NULL,
    credential_sha256  TEXT    NOT NULL,
    joined_with        TEXT    NOT NULL,
    joined_at          INTEGER NOT NULL,
    removed_at         INTEGER
);
