//! The configuration reference: every key of the TOML file, from the JSON Schema of the types
//! serde reads it into (`infergate_service::config::Config`: field names, doc comments,
//! defaults), with the flag and environment variable of `serve` that override it
//! ([`FLAG_KEYS`]). A field added to a section appears here without further work; a section
//! added to `Config` needs only `schemars::JsonSchema` and `serde::Serialize` derived.

use super::serve::{ServeArgs, FLAG_KEYS};
use clap::Args;
use infergate_service::config::Config;
use serde_json::{Map, Value};
use std::fmt::Write;

/// The reference as Markdown: the top-level keys, then one section per table of the file.
pub(crate) fn markdown() -> String {
    let schema = schemars::schema_for!(Config).to_value();
    let defs = schema.get("$defs").cloned().unwrap_or_default();
    let serve = ServeArgs::augment_args(clap::Command::new("serve"));
    let doc = Doc {
        defs: &defs,
        serve: &serve,
    };
    let mut out = String::new();
    doc.section(&mut out, "", &schema, None);
    out
}

struct Doc<'a> {
    defs: &'a Value,
    serve: &'a clap::Command,
}

impl Doc<'_> {
    /// The schema a `$ref` names, or the schema itself.
    fn resolve<'s>(&'s self, schema: &'s Value) -> &'s Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => r
                .strip_prefix("#/$defs/")
                .and_then(|name| self.defs.get(name))
                .unwrap_or(schema),
            None => schema,
        }
    }

    /// The table a key holds, when it holds one (a section), `Option` of one included.
    fn table<'s>(&'s self, schema: &'s Value) -> Option<&'s Value> {
        let schema = self.resolve(non_null(schema));
        schema.get("properties").is_some().then_some(schema)
    }

    /// Writes the section at `path` (`""`: the top level): its keys' table, then its own
    /// sections.
    fn section(&self, out: &mut String, path: &str, schema: &Value, field: Option<&Value>) {
        let empty = Map::new();
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let (tables, keys): (Vec<_>, Vec<_>) = properties
            .iter()
            .partition(|(_, s)| self.table(s).is_some());
        if path.is_empty() {
            out.push_str("## Top level\n\n");
        } else {
            let _ = writeln!(out, "## [{path}]\n");
            // The section's own doc comment, else the one of the field that holds it.
            let about = text_of(schema).or_else(|| field.and_then(text_of));
            if let Some(about) = about {
                let _ = writeln!(out, "{}\n", about.replace('\n', " "));
            }
        }
        if !keys.is_empty() {
            out.push_str("| key | type | default | flag / environment | meaning |\n");
            out.push_str("| --- | --- | --- | --- | --- |\n");
            for (name, key_schema) in keys {
                let key = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                let _ = writeln!(
                    out,
                    "| `{key}` | {} | {} | {} | {} |",
                    self.type_of(key_schema),
                    self.default_of(name, key_schema),
                    self.overridden_by(&key),
                    cell(&self.meaning(key_schema)),
                );
            }
            out.push('\n');
        }
        for (name, key_schema) in tables {
            let key = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            if let Some(table) = self.table(key_schema) {
                self.section(out, &key, table, Some(key_schema));
            }
        }
    }

    /// What a value of this schema is, in words.
    fn type_of(&self, schema: &Value) -> String {
        let schema = self.resolve(non_null(schema));
        if let Some(values) = choices(schema) {
            return values
                .iter()
                .map(|(v, _)| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(" or ");
        }
        let types: Vec<&str> = match schema.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect(),
            _ => Vec::new(),
        };
        let named = match types.as_slice() {
            ["array"] => {
                let items = schema
                    .get("items")
                    .map_or("value".into(), |i| self.type_of(i));
                return format!("array of {items}");
            }
            ["integer"] => match schema.get("minimum").and_then(Value::as_u64) {
                Some(0) => "integer ≥ 0",
                Some(1) => "integer ≥ 1",
                _ => "integer",
            },
            ["number"] => "number",
            ["boolean"] => "boolean",
            ["string"] if schema.get("pattern").is_some() => "string (see meaning)",
            ["string"] => "string",
            ["object"] => "table",
            _ => "value",
        };
        named.into()
    }

    /// The default: the schema's `x-default` words, else its `default` value.
    fn default_of(&self, name: &str, schema: &Value) -> String {
        if let Some(words) = schema.get("x-default").and_then(Value::as_str) {
            return cell(words);
        }
        match schema.get("default") {
            None | Some(Value::Null) => "—".into(),
            Some(Value::String(s)) => format!("`{s}`"),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(bytes) if name.contains("bytes") => with_unit(bytes),
                _ => format!("`{n}`"),
            },
            Some(Value::Array(a)) if a.is_empty() => "none".into(),
            Some(other) => format!("`{other}`"),
        }
    }

    /// The flag and environment variable of `serve` that set `key`.
    fn overridden_by(&self, key: &str) -> String {
        let Some((id, _)) = FLAG_KEYS.iter().find(|(_, k)| *k == key) else {
            return "—".into();
        };
        let Some(arg) = self.serve.get_arguments().find(|a| a.get_id() == *id) else {
            return "—".into();
        };
        let flag = arg.get_long().map(|l| format!("`--{l}`"));
        let env = arg.get_env().map(|e| format!("`{}`", e.to_string_lossy()));
        [flag, env]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" / ")
    }

    /// The key's doc comment, and what each of its choices means.
    fn meaning(&self, schema: &Value) -> String {
        let mut text = text_of(schema)
            .or_else(|| text_of(self.resolve(non_null(schema))))
            .unwrap_or_default();
        let described: Vec<String> = choices(self.resolve(non_null(schema)))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(v, about)| about.map(|a| format!("`{v}`: {}", a.trim_end_matches('.'))))
            .collect();
        if !described.is_empty() {
            if !text.is_empty() {
                text.push(' ');
            }
            text.push_str(&described.join("; "));
            text.push('.');
        }
        text
    }
}

/// The schema without its `null` alternative (`Option<T>` is `anyOf [T, null]`).
fn non_null(schema: &Value) -> &Value {
    for combinator in ["anyOf", "oneOf"] {
        if let Some(Value::Array(alternatives)) = schema.get(combinator) {
            let other: Vec<&Value> = alternatives
                .iter()
                .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            if let ([one], true) = (other.as_slice(), alternatives.len() == 2) {
                return one;
            }
        }
    }
    schema
}

/// A unit enum's values and what each means (serde's names, the variants' doc comments).
fn choices(schema: &Value) -> Option<Vec<(String, Option<String>)>> {
    if let Some(Value::Array(values)) = schema.get("enum") {
        return Some(
            values
                .iter()
                .filter_map(Value::as_str)
                .map(|v| (v.to_owned(), None))
                .collect(),
        );
    }
    let Some(Value::Array(variants)) = schema.get("oneOf") else {
        return None;
    };
    variants
        .iter()
        .map(|v| {
            let value = v
                .get("const")
                .or_else(|| v.get("enum").and_then(|e| e.get(0)))?
                .as_str()?;
            Some((value.to_owned(), text_of(v)))
        })
        .collect()
}

/// A schema's title and description (a doc comment's first paragraph and the rest), joined.
fn text_of(schema: &Value) -> Option<String> {
    let parts: Vec<&str> = ["title", "description"]
        .iter()
        .filter_map(|k| schema.get(*k).and_then(Value::as_str))
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

/// Text fit for one cell of a Markdown table: one line, no column separator.
fn cell(text: &str) -> String {
    text.replace("\n\n", "<br><br>")
        .replace('\n', " ")
        .replace('|', "\\|")
}

/// A byte count, with its size in KiB, MiB or GiB when it is a round one.
fn with_unit(bytes: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("`{bytes}` ({} {unit})", bytes / size);
        }
    }
    format!("`{bytes}`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_the_file_is_in_the_reference() {
        let text = markdown();
        let defaults = serde_json::to_value(Config::default()).expect("serializes");
        let mut keys = Vec::new();
        leaves(&defaults, "", &mut keys);
        // The walk reaches the keys of nested tables, not only the top level.
        assert!(
            keys.iter().any(|k| k == "limits.max_request_bytes") && keys.len() > 60,
            "{keys:?}"
        );
        for key in keys {
            // A section that is absent by default (`Option` of a table) is a leaf here.
            let row = format!("| `{key}` |");
            let section = format!("## [{key}]");
            assert!(
                text.contains(&row) || text.contains(&section),
                "{key} is missing"
            );
        }
        for (_, key) in FLAG_KEYS {
            assert!(
                text.contains(&format!("| `{key}` |")),
                "{key} of FLAG_KEYS is no key"
            );
        }
    }

    fn leaves(value: &Value, path: &str, out: &mut Vec<String>) {
        match value {
            Value::Object(fields) => {
                for (k, v) in fields {
                    let key = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    leaves(v, &key, out);
                }
            }
            _ => out.push(path.to_owned()),
        }
    }

    #[test]
    fn byte_counts_show_their_unit() {
        assert_eq!(with_unit(64 << 20), "`67108864` (64 MiB)");
        assert_eq!(with_unit(1000), "`1000`");
    }
}
