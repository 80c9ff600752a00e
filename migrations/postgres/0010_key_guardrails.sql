-- A key's own chat guardrails (see ../0007_key_guardrails.sql). Replicas see a change through
-- the key notification (api_keys_notify, 0001), which fires on any update of a key's row.
ALTER TABLE api_keys ADD COLUMN guardrails TEXT;
