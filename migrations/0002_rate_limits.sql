-- Per-key admission limits. NULL means "use the server default" ([limits] default_*).
-- rate_rps/rate_burst: GCRA rate limit (requests per second, burst); max_concurrent: requests
-- of the key in flight at once.
ALTER TABLE api_keys ADD COLUMN rate_rps REAL;
ALTER TABLE api_keys ADD COLUMN rate_burst INTEGER;
ALTER TABLE api_keys ADD COLUMN max_concurrent INTEGER;
