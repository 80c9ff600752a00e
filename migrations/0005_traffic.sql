-- Traffic policy at the edge: token limits per key, their accounting, and model-level settings.

-- A key's own token limits; NULL means "use the server default" ([limits] default_*), as for
-- the request limits (0002). tokens_per_minute: a GCRA over tokens; token_budget: tokens per
-- token_budget_period ('day' or 'month', UTC), both set or both NULL.
ALTER TABLE api_keys ADD COLUMN tokens_per_minute INTEGER;
ALTER TABLE api_keys ADD COLUMN token_budget INTEGER;
ALTER TABLE api_keys ADD COLUMN token_budget_period TEXT;

-- Tokens per key per model per hour (hour: Unix seconds of the hour's start, UTC), added to by
-- every replica as answers are settled. cached_tokens: the part of prompt_tokens +
-- completion_tokens served from the response cache (charged all the same). Revoked keys keep
-- their rows: the accounting outlives the key.
CREATE TABLE key_token_usage (
    key_id             INTEGER NOT NULL,
    model              TEXT    NOT NULL,
    hour               INTEGER NOT NULL,
    requests           INTEGER NOT NULL DEFAULT 0,
    prompt_tokens      INTEGER NOT NULL DEFAULT 0,
    completion_tokens  INTEGER NOT NULL DEFAULT 0,
    cached_tokens      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, hour, model)
);

-- A model's own settings, which belong to the model rather than to one of its versions and so
-- survive the next upload (the traffic policy; later guardrails, payload logs...): one JSON
-- object per model, one field per feature. Deleted with the model's last version.
CREATE TABLE model_settings (
    name        TEXT    NOT NULL PRIMARY KEY,
    settings    TEXT    NOT NULL DEFAULT '{}',
    updated_at  INTEGER NOT NULL
);
