-- A key's own payload log setting: the JSON text of {"mode", "sample", "sink"}, checked when it
-- was set; the key's requests are logged beside any model's or pipeline's setting. NULL: none.
ALTER TABLE api_keys ADD COLUMN payload_log TEXT;
