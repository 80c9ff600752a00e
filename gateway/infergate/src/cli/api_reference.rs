//! The HTTP API's reference page: a table of the operations of the OpenAPI document the server
//! serves (`infergate_api_types::openapi`), by tag, with the scope each needs, and the routes
//! the document leaves out.

use infergate_api_types::openapi::{document, EXCLUDED};
use serde_json::Value;
use std::fmt::Write;

/// The reference as Markdown.
pub(crate) fn markdown() -> String {
    let doc = document();
    let mut out = String::new();
    let tags: Vec<(&str, &str)> = doc["tags"]
        .as_array()
        .map(|tags| {
            tags.iter()
                .filter_map(|t| Some((t["name"].as_str()?, t["description"].as_str()?)))
                .collect()
        })
        .unwrap_or_default();
    for (tag, about) in tags {
        let _ = writeln!(out, "### {tag}\n\n{about}\n");
        out.push_str("| method | path | scope | what it does |\n| --- | --- | --- | --- |\n");
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (method, operation) in item.as_object().into_iter().flatten() {
                if operation["tags"][0] != tag {
                    continue;
                }
                let summary = operation["summary"].as_str().unwrap_or_default();
                let _ = writeln!(
                    out,
                    "| {} | `{path}` | {} | {} |",
                    method.to_uppercase(),
                    scope(operation),
                    // One line: a newline would end the table row.
                    summary.replace('\n', " ").replace('|', "\\|")
                );
            }
        }
        out.push('\n');
    }
    out.push_str(
        "### Not in the document\n\n| method | path | what it is |\n| --- | --- | --- |\n",
    );
    for e in EXCLUDED {
        let _ = writeln!(out, "| {} | `{}` | {} |", e.method, e.path, e.why);
    }
    out
}

/// The scope an operation's security requirement names: none for an open route, `any` for a
/// key of any scope.
fn scope(operation: &Value) -> String {
    let Some(requirements) = operation["security"].as_array() else {
        return "none".into();
    };
    let scopes: Vec<&str> = requirements
        .iter()
        .filter_map(Value::as_object)
        .flat_map(|r| r.values())
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match (
        requirements
            .iter()
            .all(|r| r.as_object().is_some_and(|r| r.is_empty())),
        scopes.first(),
    ) {
        (true, _) => "none".into(),
        (false, Some(scope)) => format!("`{scope}`"),
        (false, None) => "any".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_routes_and_scopes_are_told_apart() {
        let text = markdown();
        assert!(
            text.contains("| GET | `/v2/health/live` | none |"),
            "{text}"
        );
        assert!(text.contains("| POST | `/api/keys` | `admin` |"), "{text}");
        assert!(text.contains("| GET | `/api/whoami` | any |"), "{text}");
        assert!(text.contains("| GET | `/v2/stream` |"), "{text}");
    }
}
