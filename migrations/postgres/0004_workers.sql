-- Workers on other hosts (see ../0004_workers.sql).
CREATE TABLE join_secrets (
    id             TEXT    NOT NULL PRIMARY KEY,
    secret_sha256  TEXT    NOT NULL,
    created_at     BIGINT  NOT NULL,
    expires_at     BIGINT,
    revoked_at     BIGINT
);

CREATE TABLE workers (
    id                 TEXT    NOT NULL PRIMARY KEY,
    advertise          TEXT    NOT NULL,
    version            TEXT    NOT NULL,
    devices            TEXT    NOT NULL,
    credential_sha256  TEXT    NOT NULL,
    joined_with        TEXT    NOT NULL,
    joined_at          BIGINT  NOT NULL,
    removed_at         BIGINT
);
