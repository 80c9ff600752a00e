-- Replicas follow each other's models, plugins and pipelines: every statement that changes one
-- of these tables tells the replicas listening on `infergate_catalog` which table changed (its
-- name), inside the writing transaction, as `infergate_keys` does for keys (0001). PostgreSQL
-- delivers it at commit (once per distinct payload per transaction), never for a rollback; each
-- replica then re-reads that table into memory. Statement-level: a replica re-reads the whole
-- (small) table anyway, so one notification per statement is enough.
CREATE FUNCTION infergate_notify_catalog() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('infergate_catalog', TG_TABLE_NAME);
    RETURN NULL;
END
$$;
CREATE TRIGGER model_versions_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON model_versions
    FOR EACH STATEMENT EXECUTE FUNCTION infergate_notify_catalog();
CREATE TRIGGER plugins_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON plugins
    FOR EACH STATEMENT EXECUTE FUNCTION infergate_notify_catalog();
CREATE TRIGGER pipelines_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON pipelines
    FOR EACH STATEMENT EXECUTE FUNCTION infergate_notify_catalog();
CREATE TRIGGER pipeline_plugins_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON pipeline_plugins
    FOR EACH STATEMENT EXECUTE FUNCTION infergate_notify_catalog();
