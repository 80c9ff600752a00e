-- Chat guardrails are uploaded as plugins and told apart by their component's world (see
-- ../0006_guardrail_plugins.sql): the plugins' kind may now be 'guardrail'.
ALTER TABLE plugins DROP CONSTRAINT plugins_kind_check;
ALTER TABLE plugins ADD CONSTRAINT plugins_kind_check CHECK (kind IN ('pre', 'post', 'guardrail'));
