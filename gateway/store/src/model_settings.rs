//! A model's own settings (`model_settings`): what belongs to the model rather than to one of
//! its versions, so that it survives the next upload. One JSON object per model, one field per
//! feature, so a new feature adds a field, not a table. A model's row goes with its last
//! version (`Store::delete_model_version`). Pipelines share the models' names, so a pipeline's
//! own settings (its payload log) are kept here too, and go with the pipeline.

use crate::sql::{vals, Db};
use crate::{now_secs, Store, StoreError};
use serde_json::{Map, Value};

/// One model's settings: a field per feature.
pub type SettingsObject = Map<String, Value>;

/// `pg_advisory_xact_lock` key that orders replicas changing model settings ("modelset").
const SETTINGS_LOCK: i64 = 0x6d6f_6465_6c73_6574;

fn parse(name: &str, text: &str) -> Result<Map<String, Value>, StoreError> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(StoreError::Corrupt(format!(
            "model_settings of '{name}' is not a JSON object"
        ))),
    }
}

impl Store {
    /// Every model's settings, by name.
    pub fn list_model_settings(&self) -> Result<Vec<(String, SettingsObject)>, StoreError> {
        self.with(|db| {
            db.query(
                "SELECT name, settings FROM model_settings ORDER BY name",
                &[],
            )?
            .iter()
            .map(|row| {
                let name: String = row.get("name")?;
                let settings = parse(&name, &row.get::<String>("settings")?)?;
                Ok((name, settings))
            })
            .collect()
        })
    }

    /// One model's settings (empty when it has none).
    pub fn model_settings(&self, name: &str) -> Result<Map<String, Value>, StoreError> {
        self.with(|db| read(db, name))
    }

    /// Sets (`Some`) or removes (`None`) one field of `name`'s settings, as one step even
    /// across replicas, and returns the settings after it. Only for a model that has versions
    /// or a saved pipeline: `Ok(None)` when `name` is neither (a model's settings go with its
    /// last version, a pipeline's with the pipeline).
    pub fn set_model_setting(
        &self,
        name: &str,
        field: &str,
        value: Option<Value>,
    ) -> Result<Option<Map<String, Value>>, StoreError> {
        self.transaction(|db| {
            if let Db::Postgres(..) = db {
                db.execute("SELECT pg_advisory_xact_lock(?1)", vals![SETTINGS_LOCK])?;
            }
            let exists: bool = db
                .query_one(
                    "SELECT EXISTS(SELECT 1 FROM model_versions WHERE name = ?1)
                         OR EXISTS(SELECT 1 FROM pipelines WHERE name = ?1)",
                    vals![name],
                )?
                .at(0)?;
            if !exists {
                return Ok(None);
            }
            let mut settings = read(db, name)?;
            match value {
                Some(v) => settings.insert(field.to_owned(), v),
                None => settings.remove(field),
            };
            if settings.is_empty() {
                db.execute("DELETE FROM model_settings WHERE name = ?1", vals![name])?;
            } else {
                db.execute(
                    "INSERT INTO model_settings (name, settings, updated_at) VALUES (?1, ?2, ?3)
                     ON CONFLICT (name) DO UPDATE SET settings = excluded.settings,
                                                      updated_at = excluded.updated_at",
                    vals![
                        name,
                        Value::Object(settings.clone()).to_string(),
                        now_secs()
                    ],
                )?;
            }
            Ok(Some(settings))
        })
    }
}

fn read(db: &Db<'_>, name: &str) -> Result<Map<String, Value>, StoreError> {
    match db.query_opt(
        "SELECT settings FROM model_settings WHERE name = ?1",
        vals![name],
    )? {
        Some(row) => parse(name, &row.get::<String>("settings")?),
        None => Ok(Map::new()),
    }
}

/// Drops `name`'s settings when it is neither a model with a version nor a pipeline any more
/// (inside the delete's transaction).
pub(crate) fn drop_if_orphaned(db: &Db<'_>, name: &str) -> Result<(), StoreError> {
    db.execute(
        "DELETE FROM model_settings WHERE name = ?1
         AND NOT EXISTS (SELECT 1 FROM model_versions WHERE name = ?1)
         AND NOT EXISTS (SELECT 1 FROM pipelines WHERE name = ?1)",
        vals![name],
    )?;
    Ok(())
}
