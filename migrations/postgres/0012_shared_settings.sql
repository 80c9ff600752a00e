-- Run-time payload log sinks and trace settings (see ../0009_shared_settings.sql), followed by
-- every replica: the catalog channel names the table as for models (0005).
CREATE TABLE payload_log_sinks (
    name        TEXT    NOT NULL PRIMARY KEY,
    config      TEXT,
    updated_at  BIGINT  NOT NULL
);

CREATE TABLE trace_settings (
    scope           TEXT    NOT NULL PRIMARY KEY,
    level           BIGINT,
    rate            BIGINT,
    count           BIGINT,
    count_revision  BIGINT  NOT NULL DEFAULT 0,
    updated_at      BIGINT  NOT NULL
);

CREATE TRIGGER payload_log_sinks_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON payload_log_sinks
    FOR EACH STATEMENT EXECUTE FUNCTION infergate_notify_catalog();
CREATE TRIGGER trace_settings_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON trace_settings
    FOR EACH STATEMENT EXECUTE FUNCTION infergate_notify_catalog();
