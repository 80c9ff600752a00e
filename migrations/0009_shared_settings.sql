-- Settings an admin changes at run time that outlive the process and, on PostgreSQL, reach
-- every replica (see postgres/0012_shared_settings.sql).

-- Payload log sinks defined or removed through /api/payload-log/sinks: the JSON text of the
-- sink as PUT takes it, over the configuration file's sink of the same name; NULL: removed
-- (also hides a configuration file's sink of that name).
CREATE TABLE payload_log_sinks (
    name        TEXT    NOT NULL PRIMARY KEY,
    config      TEXT,
    updated_at  INTEGER NOT NULL
);

-- Trace settings changed through Triton's trace extension: scope '' is server-wide, any other
-- a model's or pipeline's override. A NULL field is not set (server-wide: the configuration's
-- value applies; a model's: the server-wide one). count_revision grows each time trace_count
-- is set or cleared, so that a replica restarts its count only then.
CREATE TABLE trace_settings (
    scope           TEXT    NOT NULL PRIMARY KEY,
    level           INTEGER,
    rate            INTEGER,
    count           INTEGER,
    count_revision  INTEGER NOT NULL DEFAULT 0,
    updated_at      INTEGER NOT NULL
);
