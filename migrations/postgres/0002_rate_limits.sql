-- Per-key admission limits (see ../0002_rate_limits.sql).
ALTER TABLE api_keys ADD COLUMN rate_rps DOUBLE PRECISION;
ALTER TABLE api_keys ADD COLUMN rate_burst BIGINT;
ALTER TABLE api_keys ADD COLUMN max_concurrent BIGINT;
