//! The sinks as the store has them: a sink defined or removed at run time is recorded there
//! (`payload_log_sinks`), so that the next start and, on PostgreSQL, every other replica have
//! it too. A stored definition of a name wins over the configuration file's sink of that name,
//! and a stored removal hides it: the last word of an admin is what every replica has, whatever
//! its own file says.

use super::config::SinkConfig;
use super::PayloadLogs;
use infergate_store::shared_settings::StoredSink;
use std::collections::BTreeMap;

impl PayloadLogs {
    /// The sinks' definitions now: what [`PayloadLogs::follow`] needs from before the store
    /// was read.
    pub fn definitions(&self) -> BTreeMap<String, SinkConfig> {
        self.sinks
            .read()
            .iter()
            .map(|(name, sink)| (name.clone(), sink.config.clone()))
            .collect()
    }

    /// Makes this process's sinks the configuration file's with `stored` over them. Sinks
    /// already as wanted are left alone (writers and counts kept); a changed one is replaced
    /// as `PUT` replaces it. Blocking (see [`PayloadLogs::define`]). Returns what could not be
    /// applied, each left as it was.
    ///
    /// `before` is [`PayloadLogs::definitions`] from before `stored` was read: a sink this
    /// process defined, changed or removed itself since then is left as it is, since `stored`
    /// may predate that change (whose own notification brings a newer read).
    pub fn follow(
        &self,
        stored: Vec<StoredSink>,
        before: &BTreeMap<String, SinkConfig>,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        let mut wanted: BTreeMap<String, Option<SinkConfig>> = self
            .file_sinks
            .iter()
            .map(|(name, config)| (name.clone(), Some(config.clone())))
            .collect();
        for (name, text) in stored {
            match text.map(|t| SinkConfig::parse(t.as_bytes())).transpose() {
                Ok(config) => {
                    wanted.insert(name, config);
                }
                Err(e) => errors.push(format!("sink '{name}' as stored: {e}")),
            }
        }
        let current = self.definitions();
        let untouched = |name: &str| current.get(name) == before.get(name);
        // Removals first: a file a removed sink wrote is then free for a sink defined next.
        for name in current.keys() {
            if !matches!(wanted.get(name), Some(Some(_))) && untouched(name) {
                self.overriding_the_file(name, &current, "removes");
                self.remove(name);
            }
        }
        for (name, config) in wanted {
            let Some(config) = config else { continue };
            if current.get(&name) == Some(&config) || !untouched(&name) {
                continue;
            }
            self.overriding_the_file(&name, &current, "replaces");
            if let Err(e) = self.define(&name, config) {
                errors.push(format!("sink '{name}': {}", e.message));
            }
        }
        errors
    }

    /// Says so when the store's word replaces the configuration file's sink `name` here (once:
    /// when the sink still is the file's), since editing the file then changes nothing.
    fn overriding_the_file(&self, name: &str, current: &BTreeMap<String, SinkConfig>, what: &str) {
        if self
            .file_sinks
            .get(name)
            .is_some_and(|file| current.get(name) == Some(file))
        {
            tracing::warn!(sink = name, "a sink stored at run time {what} the configuration file's sink of this name (PUT or DELETE /api/payload-log/sinks/{name} changes it)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload_log::config::PayloadLogConfig;

    fn file_sink(dir: &std::path::Path, name: &str) -> (String, String) {
        let path = dir.join(format!("{name}.jsonl"));
        let text = serde_json::json!({"file": {"path": path}}).to_string();
        (name.to_owned(), text)
    }

    #[test]
    fn a_read_older_than_this_process_own_change_does_not_undo_it() {
        let dir = tempfile::tempdir().unwrap();
        let logs = PayloadLogs::start(&PayloadLogConfig::default()).unwrap();
        let (old, old_text) = file_sink(dir.path(), "old");
        let parse = |t: &str| SinkConfig::parse(t.as_bytes()).unwrap();
        logs.define(&old, parse(&old_text)).unwrap();
        // A follower snapshots the sinks and reads a store that has neither `old` nor `new`;
        // meanwhile this process defines `new` itself.
        let before = logs.definitions();
        let (new, new_text) = file_sink(dir.path(), "new");
        logs.define(&new, parse(&new_text)).unwrap();
        assert!(logs.follow(Vec::new(), &before).is_empty());
        // `new` was defined after the read began: kept. `old` was not touched: the store's
        // word (no such sink) holds.
        assert_eq!(logs.sink_names(), std::slice::from_ref(&new));
        // A newer read that has `new` defines nothing anew and keeps it.
        let before = logs.definitions();
        assert!(logs
            .follow(vec![(new.clone(), Some(new_text))], &before)
            .is_empty());
        assert_eq!(logs.sink_names(), [new]);
    }
}
