-- A key's own payload log setting (see ../0008_key_payload_log.sql). Replicas see a change
-- through the key notification (api_keys_notify, 0001), which fires on any update of a key's row.
ALTER TABLE api_keys ADD COLUMN payload_log TEXT;
