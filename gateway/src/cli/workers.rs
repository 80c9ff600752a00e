//! `infergate workers ...`: join secrets for new workers, and the workers that joined, on a data
//! directory (offline) or a running manager (`--url`, admin key).

use super::client::{online, Target};
use super::open_store;
use super::table::Table;
use crate::workers::material::Material;
use anyhow::anyhow;
use clap::Subcommand;
use serde_json::{json, Value};

#[derive(Subcommand)]
pub(crate) enum WorkersCommand {
    /// Join secrets: create one (a worker joins with `infergate worker --join URL
    /// --join-token SECRET`) or revoke one.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// List workers: live state from a running manager (--url), registrations offline.
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Drain a worker on a running manager (--url): no new requests, running ones finish.
    Drain {
        #[command(flatten)]
        target: Target,
        /// Worker id (w-...).
        id: String,
    },
    /// Remove a worker: out of routing at once, and it cannot rejoin under its id.
    Remove {
        #[command(flatten)]
        target: Target,
        /// Worker id (w-...).
        id: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum TokenCommand {
    /// Create a join secret; prints it alone on stdout (shown once).
    Create {
        #[command(flatten)]
        target: Target,
        /// Seconds the secret admits workers [default: until revoked].
        #[arg(long)]
        ttl_s: Option<u64>,
    },
    /// Revoke a join secret by its id (the part after `igj_`, before the first dot): it admits
    /// nobody from now on; workers that joined with it stay.
    Revoke {
        #[command(flatten)]
        target: Target,
        id: String,
    },
}

pub(super) fn run(cmd: WorkersCommand) -> anyhow::Result<()> {
    match cmd {
        WorkersCommand::Token {
            command: TokenCommand::Create { target, ttl_s },
        } => {
            let token = match &target.url {
                Some(_) => {
                    let v = online(
                        &target,
                        reqwest::Method::POST,
                        "/api/workers/tokens",
                        Some(json!({ "ttl_s": ttl_s })),
                    )?;
                    v["token"]
                        .as_str()
                        .ok_or_else(|| anyhow!("server answered without a token"))?
                        .to_owned()
                }
                None => {
                    let store = open_store(&target.data_dir)?;
                    let material = Material::open(&store)?;
                    crate::workers::manager::create_join_secret(&store, &material.ca, ttl_s)?
                        .0
                        .to_string()
                }
            };
            println!("{token}");
        }
        WorkersCommand::Token {
            command: TokenCommand::Revoke { target, id },
        } => {
            match &target.url {
                Some(_) => {
                    online(
                        &target,
                        reqwest::Method::DELETE,
                        &format!("/api/workers/tokens/{id}"),
                        None,
                    )?;
                }
                None => {
                    if !open_store(&target.data_dir)?.revoke_join_secret(&id)? {
                        return Err(anyhow!("no join secret '{id}' (or it was revoked already)"));
                    }
                }
            }
            eprintln!("revoked join secret {id}");
        }
        WorkersCommand::List { target } => {
            let workers = match &target.url {
                Some(_) => {
                    online(&target, reqwest::Method::GET, "/api/workers", None)?["workers"].clone()
                }
                None => serde_json::to_value(open_store(&target.data_dir)?.list_workers()?)?,
            };
            print_workers(&workers);
        }
        WorkersCommand::Drain { target, id } => {
            if target.url.is_none() {
                return Err(anyhow!(
                    "drain acts on a running manager's live registry: give --url (and --api-key)"
                ));
            }
            online(
                &target,
                reqwest::Method::POST,
                &format!("/api/workers/{id}/drain"),
                None,
            )?;
            eprintln!("draining {id}");
        }
        WorkersCommand::Remove { target, id } => {
            match &target.url {
                Some(_) => {
                    online(
                        &target,
                        reqwest::Method::DELETE,
                        &format!("/api/workers/{id}"),
                        None,
                    )?;
                }
                None => {
                    if !open_store(&target.data_dir)?.remove_worker(&id)? {
                        return Err(anyhow!("no worker '{id}' (or it was removed already)"));
                    }
                }
            }
            eprintln!("removed {id}");
        }
    }
    Ok(())
}

/// One line per worker: live rows carry a state and last-seen age, offline rows only whether
/// they were removed.
fn print_workers(workers: &Value) {
    let mut table = Table::new(&["ID", "STATE", "SEEN", "ADDRESS", "IN-FLIGHT", "MODELS"]);
    for w in workers.as_array().into_iter().flatten() {
        let state = match w["state"].as_str() {
            Some(s) => s.to_owned(),
            None if w["removed_at"].is_null() => "registered".into(),
            None => "removed".into(),
        };
        let seen = w["last_seen_ms"]
            .as_u64()
            .map_or("-".into(), |ms| format!("{:.1}s", ms as f64 / 1000.0));
        let models: Vec<String> = w["report"]["models"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| format!("{}:{}", m["name"].as_str().unwrap_or("?"), m["version"]))
            .collect();
        table.row([
            w["id"].as_str().unwrap_or("").to_owned(),
            state,
            seen,
            w["advertise"].as_str().unwrap_or("").to_owned(),
            w["report"]["in_flight"]
                .as_u64()
                .map_or("-".into(), |n| n.to_string()),
            models.join(","),
        ]);
    }
    table.print();
}
