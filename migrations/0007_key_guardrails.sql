-- A key's own chat guardrails: a JSON list of attachments ({"plugin": "name[@version]",
-- "config": {...}}), run after the server's and before the model's on that key's chat requests.
-- NULL: none of its own.
ALTER TABLE api_keys ADD COLUMN guardrails TEXT;
