-- Token limits per key, their accounting, and model-level settings (see ../0005_traffic.sql).
ALTER TABLE api_keys ADD COLUMN tokens_per_minute BIGINT;
ALTER TABLE api_keys ADD COLUMN token_budget BIGINT;
ALTER TABLE api_keys ADD COLUMN token_budget_period TEXT;

CREATE TABLE key_token_usage (
    key_id             BIGINT  NOT NULL,
    model              TEXT    NOT NULL,
    hour               BIGINT  NOT NULL,
    requests           BIGINT  NOT NULL DEFAULT 0,
    prompt_tokens      BIGINT  NOT NULL DEFAULT 0,
    completion_tokens  BIGINT  NOT NULL DEFAULT 0,
    cached_tokens      BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, hour, model)
);

CREATE TABLE model_settings (
    name        TEXT    NOT NULL PRIMARY KEY,
    settings    TEXT    NOT NULL DEFAULT '{}',
    updated_at  BIGINT  NOT NULL
);

-- Replicas apply a model's settings (its traffic policy) live: the catalog channel names the
-- table as for model versions (0005).
CREATE TRIGGER model_settings_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON model_settings
    FOR EACH STATEMENT EXECUTE FUNCTION infergate_notify_catalog();
