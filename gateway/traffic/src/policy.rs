//! A model's traffic policy: how requests that name no version are spread over its versions.
//!
//! It belongs to the model, not to a version, so it survives the next upload. Its JSON:
//!
//! ```json
//! {"split": [{"version": 1, "weight": 90}, {"version": 2, "weight": 10}],
//!  "sticky": "key",
//!  "mirror": {"version": 3, "percent": 100}}
//! ```
//!
//! Every part is optional, but a policy must say something: a split, a mirror, or both.
//! [`TrafficPolicy::from_json`] refuses malformed JSON and [`TrafficPolicy::validate`] refuses
//! a policy that does not fit the model's versions; both errors name the offending field as
//! a path (`split[1].weight`), so the API can answer 400 with it.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Largest weight of one version. Weights are relative: 90/10 and 9/1 are the same split.
pub const MAX_WEIGHT: u32 = 1_000_000;
/// Most versions one split may name.
pub const MAX_SPLIT: usize = 64;
/// Longest header name `sticky: "header:NAME"` may name.
pub const MAX_HEADER_NAME: usize = 128;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficPolicy {
    /// Versions and their weights; absent: the model's version policy picks the version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Vec<SplitEntry>>,
    /// What keeps one caller on one version; absent: every request is drawn anew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky: Option<Sticky>,
    /// A share of requests copied to another version, whose answers are dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<Mirror>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitEntry {
    pub version: u64,
    #[serde(deserialize_with = "positive_weight")]
    pub weight: u32,
}

/// What identifies a caller for sticky routing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sticky {
    /// The caller's API key (its id).
    Key,
    /// The value of this request header (its name lower-cased). A request without the header
    /// is drawn as if the policy were not sticky.
    Header(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    pub version: u64,
    /// Share of requests copied, 0 to 100 (fractions allowed, down to 0.0001).
    pub percent: f64,
}

/// A version of the model as the catalog sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownVersion {
    pub version: u64,
    /// False for a version whose files are present but failed to load (or are marked
    /// unloadable): traffic must not be sent there.
    pub loadable: bool,
}

/// A policy the API must refuse (400): `field` is a path into the JSON (`split[1].weight`,
/// `mirror.percent`, or empty for the whole document).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct PolicyError {
    pub field: String,
    pub message: String,
}

impl PolicyError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> PolicyError {
        PolicyError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl TrafficPolicy {
    /// Parses the API's JSON. Unknown fields, wrong types and non-positive weights are refused
    /// here, naming the field; [`validate`](Self::validate) checks the versions.
    pub fn from_json(body: &[u8]) -> Result<TrafficPolicy, PolicyError> {
        let mut de = serde_json::Deserializer::from_slice(body);
        let policy: TrafficPolicy = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { String::new() } else { path };
            // serde_json appends " at line L column C": useful for syntax errors only.
            PolicyError::new(field, e.into_inner().to_string())
        })?;
        de.end()
            .map_err(|e| PolicyError::new("", format!("trailing data after the policy: {e}")))?;
        Ok(policy)
    }

    /// Checks the policy against the model's versions: every version named exists and is
    /// loadable, no version is named twice, weights are positive, the mirror has another
    /// version to copy to and its percent is within 0..=100.
    pub fn validate(&self, versions: &[KnownVersion]) -> Result<(), PolicyError> {
        if self.split.is_none() && self.mirror.is_none() {
            return Err(PolicyError::new(
                "",
                "a traffic policy needs a split, a mirror or both (DELETE the policy to return to the version policy)",
            ));
        }
        let known = |field: &str, version: u64| -> Result<(), PolicyError> {
            match versions.iter().find(|v| v.version == version) {
                None => Err(PolicyError::new(
                    field,
                    format!(
                        "version {version} does not exist (versions: {})",
                        list(versions)
                    ),
                )),
                Some(v) if !v.loadable => Err(PolicyError::new(
                    field,
                    format!("version {version} is not loadable"),
                )),
                Some(_) => Ok(()),
            }
        };
        if let Some(split) = &self.split {
            if split.is_empty() {
                return Err(PolicyError::new("split", "must name at least one version"));
            }
            if split.len() > MAX_SPLIT {
                return Err(PolicyError::new(
                    "split",
                    format!("names {} versions, at most {MAX_SPLIT}", split.len()),
                ));
            }
            for (i, entry) in split.iter().enumerate() {
                known(&format!("split[{i}].version"), entry.version)?;
                if entry.weight == 0 || entry.weight > MAX_WEIGHT {
                    return Err(PolicyError::new(
                        format!("split[{i}].weight"),
                        format!("must be a positive integer up to {MAX_WEIGHT}"),
                    ));
                }
                if let Some(j) = split[..i].iter().position(|e| e.version == entry.version) {
                    return Err(PolicyError::new(
                        format!("split[{i}].version"),
                        format!("version {} is already split[{j}]", entry.version),
                    ));
                }
            }
        } else if self.sticky.is_some() {
            return Err(PolicyError::new(
                "sticky",
                "needs a split: without one there is no choice to keep",
            ));
        }
        if let Some(Sticky::Header(name)) = &self.sticky {
            check_header_name(name)?;
        }
        if let Some(mirror) = &self.mirror {
            if !mirror.percent.is_finite() || !(0.0..=100.0).contains(&mirror.percent) {
                return Err(PolicyError::new(
                    "mirror.percent",
                    format!("must be a number from 0 to 100, got {}", mirror.percent),
                ));
            }
            known("mirror.version", mirror.version)?;
            if versions.len() == 1 {
                return Err(PolicyError::new(
                    "mirror.version",
                    "the model has only one version: a mirror needs another version to copy traffic to",
                ));
            }
            if let Some([only]) = self.split.as_deref() {
                if only.version == mirror.version {
                    return Err(PolicyError::new(
                        "mirror.version",
                        format!(
                            "version {} already serves every request (the split's only version)",
                            mirror.version
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The versions the policy sends traffic to or mirrors (for load decisions: these must
    /// stay loaded while the policy names them).
    pub fn versions(&self) -> impl Iterator<Item = u64> + '_ {
        self.split
            .iter()
            .flatten()
            .map(|e| e.version)
            .chain(self.mirror.iter().map(|m| m.version))
    }

    /// All the weight on one version (the dashboard's "promote"), keeping sticky and mirror
    /// unless the mirror was that version.
    pub fn promote(&self, version: u64) -> TrafficPolicy {
        TrafficPolicy {
            split: Some(vec![SplitEntry { version, weight: 1 }]),
            sticky: self.sticky.clone(),
            mirror: self.mirror.filter(|m| m.version != version),
        }
    }
}

fn list(versions: &[KnownVersion]) -> String {
    if versions.is_empty() {
        return "none".to_owned();
    }
    versions
        .iter()
        .map(|v| v.version.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// An HTTP field name is a token (RFC 9110 5.1): refusing anything else now means the
/// gateway never looks for a header no client can send.
fn check_header_name(name: &str) -> Result<(), PolicyError> {
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || name.len() > MAX_HEADER_NAME || !name.chars().all(tchar) {
        return Err(PolicyError::new(
            "sticky",
            format!(
                "\"header:NAME\" needs an HTTP header name (letters, digits and !#$%&'*+-.^_`|~, at most {MAX_HEADER_NAME}), got {name:?}"
            ),
        ));
    }
    Ok(())
}

impl Serialize for Sticky {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Sticky::Key => s.serialize_str("key"),
            Sticky::Header(name) => s.serialize_str(&format!("header:{name}")),
        }
    }
}

impl<'de> Deserialize<'de> for Sticky {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Sticky, D::Error> {
        let text = String::deserialize(d)?;
        if text == "key" {
            return Ok(Sticky::Key);
        }
        match text.strip_prefix("header:") {
            Some(name) => {
                check_header_name(name).map_err(|e| de::Error::custom(e.message))?;
                Ok(Sticky::Header(name.to_ascii_lowercase()))
            }
            None => Err(de::Error::custom(format!(
                "expected \"key\" or \"header:NAME\", got {text:?}"
            ))),
        }
    }
}

/// A weight must be a positive integer; serde's own message for 1.5 or -1 ("expected u32")
/// would not tell the operator what is wanted.
fn positive_weight<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    struct Weight;
    const WANT: &str = "a positive integer weight (1 to 1000000)";
    impl Visitor<'_> for Weight {
        type Value = u32;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(WANT)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u32, E> {
            match u32::try_from(v) {
                Ok(w) if (1..=MAX_WEIGHT).contains(&w) => Ok(w),
                _ => Err(E::invalid_value(de::Unexpected::Unsigned(v), &WANT)),
            }
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u32, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::invalid_value(de::Unexpected::Signed(v), &WANT)),
            }
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u32, E> {
            Err(E::invalid_value(de::Unexpected::Float(v), &WANT))
        }
    }
    d.deserialize_any(Weight)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(list: &[(u64, bool)]) -> Vec<KnownVersion> {
        list.iter()
            .map(|&(version, loadable)| KnownVersion { version, loadable })
            .collect()
    }

    fn refused(json: &str, known: &[(u64, bool)]) -> PolicyError {
        match TrafficPolicy::from_json(json.as_bytes()) {
            Err(e) => e,
            Ok(p) => p
                .validate(&versions(known))
                .expect_err("policy should be refused"),
        }
    }

    #[test]
    fn the_issue_example_round_trips() {
        let json = r#"{"split": [{"version": 1, "weight": 90}, {"version": 2, "weight": 10}],
            "sticky": "key", "mirror": {"version": 3, "percent": 100}}"#;
        let p = TrafficPolicy::from_json(json.as_bytes()).unwrap();
        assert_eq!(p.sticky, Some(Sticky::Key));
        assert_eq!(p.split.as_ref().unwrap()[1].weight, 10);
        p.validate(&versions(&[(1, true), (2, true), (3, true)]))
            .unwrap();
        let again: TrafficPolicy =
            serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(again, p);
        assert_eq!(p.versions().collect::<Vec<_>>(), vec![1, 2, 3]);
        let header = TrafficPolicy::from_json(
            br#"{"split": [{"version": 1, "weight": 1}], "sticky": "header:X-User"}"#,
        )
        .unwrap();
        assert_eq!(header.sticky, Some(Sticky::Header("x-user".into())));
        assert_eq!(
            serde_json::to_value(&header).unwrap()["sticky"],
            "header:x-user"
        );
        // No sticky, no mirror: those fields are left out.
        assert_eq!(
            serde_json::to_string(&p.promote(3)).unwrap(),
            r#"{"split":[{"version":3,"weight":1}],"sticky":"key"}"#
        );
    }

    #[test]
    fn bad_weights_name_their_field() {
        let all = [(1, true), (2, true)];
        for (weight, why) in [
            ("0", "positive integer"),
            ("-3", "positive integer"),
            ("1.5", "positive integer"),
            ("\"9\"", "positive integer"),
            ("2000000", "positive integer"),
        ] {
            let json = format!(
                r#"{{"split": [{{"version": 1, "weight": 1}}, {{"version": 2, "weight": {weight}}}]}}"#
            );
            let e = refused(&json, &all);
            assert_eq!(e.field, "split[1].weight", "{weight}: {e}");
            assert!(e.message.contains(why), "{weight}: {e}");
        }
        // Built in code rather than parsed: validate still checks.
        let p = TrafficPolicy {
            split: Some(vec![SplitEntry {
                version: 1,
                weight: 0,
            }]),
            sticky: None,
            mirror: None,
        };
        let e = p.validate(&versions(&all)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "split[0].weight: must be a positive integer up to 1000000"
        );
    }

    #[test]
    fn versions_must_exist_be_loadable_and_appear_once() {
        let known = [(1, true), (2, false), (3, true)];
        let e = refused(
            r#"{"split": [{"version": 1, "weight": 1}, {"version": 7, "weight": 1}]}"#,
            &known,
        );
        assert_eq!(e.field, "split[1].version");
        assert!(
            e.message.contains("does not exist (versions: 1, 2, 3)"),
            "{e}"
        );
        let e = refused(r#"{"split": [{"version": 2, "weight": 1}]}"#, &known);
        assert_eq!(e.to_string(), "split[0].version: version 2 is not loadable");
        let e = refused(
            r#"{"split": [{"version": 3, "weight": 1}, {"version": 1, "weight": 1}, {"version": 3, "weight": 2}]}"#,
            &known,
        );
        assert_eq!(e.field, "split[2].version");
        assert!(e.message.contains("already split[0]"), "{e}");
        let e = refused(r#"{"split": []}"#, &known);
        assert_eq!(e.field, "split");
        let e = refused(r#"{"mirror": {"version": 9, "percent": 5}}"#, &known);
        assert_eq!(e.field, "mirror.version");
        let e = refused(r#"{"mirror": {"version": 2, "percent": 5}}"#, &known);
        assert!(e.message.contains("not loadable"), "{e}");
    }

    #[test]
    fn mirror_needs_another_version_and_a_percent() {
        let e = refused(r#"{"mirror": {"version": 1, "percent": 50}}"#, &[(1, true)]);
        assert_eq!(e.field, "mirror.version");
        assert!(e.message.contains("only one version"), "{e}");
        let two = [(1, true), (2, true)];
        let e = refused(
            r#"{"split": [{"version": 2, "weight": 5}], "mirror": {"version": 2, "percent": 50}}"#,
            &two,
        );
        assert_eq!(e.field, "mirror.version");
        for percent in ["-1", "100.5", "1e9"] {
            let json = format!(r#"{{"mirror": {{"version": 2, "percent": {percent}}}}}"#);
            let e = refused(&json, &two);
            assert_eq!(e.field, "mirror.percent", "{percent}: {e}");
        }
        let e = refused(r#"{"mirror": {"version": 2, "percent": "all"}}"#, &two);
        assert_eq!(e.field, "mirror.percent");
        for percent in ["0", "0.5", "100"] {
            let json = format!(r#"{{"mirror": {{"version": 2, "percent": {percent}}}}}"#);
            TrafficPolicy::from_json(json.as_bytes())
                .unwrap()
                .validate(&versions(&two))
                .unwrap();
        }
    }

    #[test]
    fn shape_errors_name_the_field() {
        let two = [(1, true), (2, true)];
        let e = refused("{}", &two);
        assert_eq!(e.field, "");
        assert!(e.message.contains("needs a split, a mirror"), "{e}");
        let e = refused(
            r#"{"sticky": "key", "mirror": {"version": 2, "percent": 1}}"#,
            &two,
        );
        assert_eq!(e.field, "sticky");
        let e = refused(
            r#"{"split": [{"version": 1, "weight": 1}], "sticky": "cookie"}"#,
            &two,
        );
        assert_eq!(e.field, "sticky");
        assert!(e.message.contains("\"key\" or \"header:NAME\""), "{e}");
        let e = refused(
            r#"{"split": [{"version": 1, "weight": 1}], "sticky": "header:"}"#,
            &two,
        );
        assert_eq!(e.field, "sticky");
        let e = refused(
            r#"{"split": [{"version": 1, "weight": 1}], "sticky": "header:a b"}"#,
            &two,
        );
        assert_eq!(e.field, "sticky");
        let e = refused(r#"{"split": [{"version": 1, "wieght": 1}]}"#, &two);
        assert_eq!(e.field, "split[0].wieght");
        assert!(e.message.contains("unknown field `wieght`"), "{e}");
        let e = refused(r#"{"split": [{"version": -1, "weight": 1}]}"#, &two);
        assert_eq!(e.field, "split[0].version");
        let e = refused(r#"{"canary": 10}"#, &two);
        assert!(e.message.contains("unknown field `canary`"), "{e}");
        let e = refused(r#"{"split": [{"version": 1, "weight": 1}]} x"#, &two);
        assert!(e.message.contains("trailing"), "{e}");
        let e = refused("\"split\"", &two);
        assert_eq!(e.field, "");
    }
}
