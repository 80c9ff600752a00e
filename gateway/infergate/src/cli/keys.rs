//! `infergate keys`: create, limit, list and revoke API keys, offline on a data directory or
//! online through the admin API.

use super::client::{online, Target};
use super::data_dir::open_store;
use super::table::Table;
use anyhow::anyhow;
use clap::{Args, Subcommand};
use infergate_api_types::keys::{KeyCreated, KeyInfo, KeyList, KeyRevoked, KeyUpdated};
use infergate_store::auth::Scopes;
use infergate_store::keys::{KeyLimits, KeyRecord};

#[derive(Subcommand)]
pub(super) enum KeysCommand {
    /// Create a key; prints the secret alone on stdout (shown once).
    Create {
        #[command(flatten)]
        target: Target,
        /// Comma-separated scopes: infer, upload, admin (admin implies the others).
        #[arg(long, default_value = "infer")]
        scope: String,
        /// A name to recognise the key by.
        #[arg(long, default_value = "cli")]
        name: String,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Change a key's rate limit, concurrency cap and token limits (flags not given stay as
    /// they are).
    Limits {
        #[command(flatten)]
        target: Target,
        /// Numeric id or 12-character public id.
        id: String,
        #[command(flatten)]
        limits: LimitArgs,
        /// Drop the key's own limits: it gets the server defaults again.
        #[arg(long, conflicts_with_all = ["rps", "burst", "max_concurrent", "tokens_per_minute", "token_budget"])]
        clear: bool,
    },
    /// List keys (never their secrets).
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Revoke a key by id or public id; takes effect on the next request.
    Revoke {
        #[command(flatten)]
        target: Target,
        /// Numeric id or 12-character public id.
        id: String,
    },
}

/// A key's own limits; absent = the server default.
#[derive(Args)]
pub(super) struct LimitArgs {
    /// Rate limit in requests per second (GCRA).
    #[arg(long)]
    rps: Option<f64>,
    /// Requests allowed at once above the rate [default: the rate rounded up].
    #[arg(long, requires = "rps")]
    burst: Option<u32>,
    /// Requests of this key in flight at once.
    #[arg(long)]
    max_concurrent: Option<u32>,
    /// Tokens per minute (LLM requests: prompt plus completion).
    #[arg(long)]
    tokens_per_minute: Option<u64>,
    /// A token budget per UTC day or month: `N/day` or `N/month`.
    #[arg(long, value_parser = parse_budget)]
    token_budget: Option<(u64, String)>,
}

/// `N/day` or `N/month`.
fn parse_budget(text: &str) -> Result<(u64, String), String> {
    let (tokens, period) = text
        .split_once('/')
        .ok_or_else(|| format!("expected N/day or N/month, got '{text}'"))?;
    let tokens = tokens
        .trim()
        .parse::<u64>()
        .map_err(|e| format!("'{tokens}' is not a token count: {e}"))?;
    match period.trim() {
        p @ ("day" | "month") => Ok((tokens, p.to_owned())),
        other => Err(format!("the period is day or month, not '{other}'")),
    }
}

impl LimitArgs {
    /// The admin API's JSON fields for the flags given.
    fn to_json(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        if let Some(rps) = self.rps {
            m.insert(
                "rate_limit".into(),
                serde_json::json!({"rps": rps, "burst": self.burst}),
            );
        }
        if let Some(n) = self.max_concurrent {
            m.insert("max_concurrent".into(), serde_json::json!(n));
        }
        if let Some(n) = self.tokens_per_minute {
            m.insert("tokens_per_minute".into(), serde_json::json!(n));
        }
        if let Some((tokens, period)) = &self.token_budget {
            m.insert(
                "token_budget".into(),
                serde_json::json!({"tokens": tokens, "period": period}),
            );
        }
        m
    }

    fn apply(&self, current: KeyLimits) -> anyhow::Result<KeyLimits> {
        Ok(infergate_service::key_limits::parse_limits(
            &self.to_json(),
            current,
        )?)
    }
}

impl KeysCommand {
    pub(super) fn target_mut(&mut self) -> &mut Target {
        match self {
            KeysCommand::Create { target, .. }
            | KeysCommand::Limits { target, .. }
            | KeysCommand::List { target }
            | KeysCommand::Revoke { target, .. } => target,
        }
    }
}

pub(super) fn run(cmd: KeysCommand) -> anyhow::Result<()> {
    match cmd {
        KeysCommand::Create {
            target,
            scope,
            name,
            limits,
        } => {
            let scopes = Scopes::parse_list(&scope).map_err(|e| anyhow!(e))?;
            let own = limits.apply(KeyLimits::default())?;
            let secret = match &target.url {
                Some(_) => {
                    let scopes: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
                    let mut body = limits.to_json();
                    body.insert("name".into(), serde_json::json!(name));
                    body.insert("scopes".into(), serde_json::json!(scopes));
                    let created: KeyCreated = online(
                        &target,
                        reqwest::Method::POST,
                        "/api/keys",
                        Some(body.into()),
                    )?;
                    created.secret
                }
                None => {
                    open_store(&target.data_dir)?
                        .create_key_with_limits(&name, &scopes, &own)?
                        .1
                }
            };
            println!("{secret}");
        }
        KeysCommand::Limits {
            target,
            id,
            limits,
            clear,
        } => {
            let record = match &target.url {
                Some(_) => {
                    let body = if clear {
                        serde_json::json!({"rate_limit": null, "max_concurrent": null,
                            "tokens_per_minute": null, "token_budget": null})
                    } else {
                        limits.to_json().into()
                    };
                    let updated: KeyUpdated = online(
                        &target,
                        reqwest::Method::PATCH,
                        &format!("/api/keys/{id}"),
                        Some(body),
                    )?;
                    updated.key
                }
                None => {
                    let store = open_store(&target.data_dir)?;
                    let current = store
                        .get_key(&id)?
                        .ok_or_else(|| anyhow!("no API key '{id}'"))?;
                    let new = if clear {
                        KeyLimits::default()
                    } else {
                        limits.apply(current.limits())?
                    };
                    let updated = store
                        .set_key_limits(&id, &new)?
                        .ok_or_else(|| anyhow!("no API key '{id}'"))?;
                    updated.info()
                }
            };
            eprintln!(
                "key {}: rate_limit {}, max_concurrent {}, tokens_per_minute {}, token_budget {}",
                record.id,
                serde_json::to_string(&record.rate_limit)?,
                serde_json::to_string(&record.max_concurrent)?,
                serde_json::to_string(&record.tokens_per_minute)?,
                serde_json::to_string(&record.token_budget)?
            );
        }
        KeysCommand::List { target } => {
            let keys: Vec<KeyInfo> = match &target.url {
                Some(_) => online::<KeyList>(&target, reqwest::Method::GET, "/api/keys", None)?
                    .keys
                    .into_iter()
                    .map(|k| k.key)
                    .collect(),
                None => open_store(&target.data_dir)?
                    .list_keys()?
                    .iter()
                    .map(KeyRecord::info)
                    .collect(),
            };
            let mut table = Table::new(&["ID", "PUBLIC ID", "NAME", "SCOPES", "STATUS"]);
            for k in keys {
                let status = match k.revoked_at {
                    None => "active",
                    Some(_) => "revoked",
                };
                table.row([
                    k.id.to_string(),
                    k.public_id,
                    k.name,
                    k.scopes.join(","),
                    status.into(),
                ]);
            }
            table.print();
        }
        KeysCommand::Revoke { target, id } => {
            match &target.url {
                Some(_) => {
                    online::<KeyRevoked>(
                        &target,
                        reqwest::Method::DELETE,
                        &format!("/api/keys/{id}"),
                        None,
                    )?;
                }
                None => {
                    open_store(&target.data_dir)?
                        .revoke_key(&id)?
                        .ok_or_else(|| anyhow!("no API key '{id}'"))?;
                }
            }
            eprintln!("revoked {id}");
        }
    }
    Ok(())
}
