//! `infergate workers ...`: join secrets for new workers, and the workers that joined, on a data
//! directory (offline) or a running manager (`--url`, admin key).

use super::client::{online, Target};
use super::data_dir::open_store;
use super::table::Table;
use anyhow::anyhow;
use clap::Subcommand;
use infergate_api_types::workers::{
    JoinTokenCreated, TokenRevoked, WorkerDraining, WorkerList, WorkerRemoved, WorkerView,
};
use infergate_service::manager::material::Material;
use infergate_store::workers::WorkerRecord;
use serde_json::json;

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

impl WorkersCommand {
    pub(super) fn target_mut(&mut self) -> &mut Target {
        match self {
            WorkersCommand::Token {
                command: TokenCommand::Create { target, .. } | TokenCommand::Revoke { target, .. },
            }
            | WorkersCommand::List { target }
            | WorkersCommand::Drain { target, .. }
            | WorkersCommand::Remove { target, .. } => target,
        }
    }
}

pub(super) fn run(cmd: WorkersCommand) -> anyhow::Result<()> {
    match cmd {
        WorkersCommand::Token {
            command: TokenCommand::Create { target, ttl_s },
        } => {
            let token = match &target.url {
                Some(_) => {
                    let created: JoinTokenCreated = online(
                        &target,
                        reqwest::Method::POST,
                        "/api/workers/tokens",
                        Some(json!({ "ttl_s": ttl_s })),
                    )?;
                    created.token
                }
                None => {
                    let store = open_store(&target.data_dir)?;
                    let material = Material::open(&store)?;
                    infergate_service::manager::admission::create_join_secret(
                        &store,
                        &material.ca,
                        ttl_s,
                    )?
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
                    online::<TokenRevoked>(
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
            let rows: Vec<[String; 6]> = match &target.url {
                Some(_) => {
                    online::<WorkerList>(&target, reqwest::Method::GET, "/api/workers", None)?
                        .workers
                        .iter()
                        .map(live_row)
                        .collect()
                }
                None => open_store(&target.data_dir)?
                    .list_workers()?
                    .iter()
                    .map(stored_row)
                    .collect(),
            };
            let mut table = Table::new(&["ID", "STATE", "SEEN", "ADDRESS", "IN-FLIGHT", "MODELS"]);
            for row in rows {
                table.row(row);
            }
            table.print();
        }
        WorkersCommand::Drain { target, id } => {
            if target.url.is_none() {
                return Err(anyhow!(
                    "drain acts on a running manager's live registry: give --url (and --api-key)"
                ));
            }
            online::<WorkerDraining>(
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
                    online::<WorkerRemoved>(
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

/// A worker of a running manager's registry: its state, last-seen age and last report.
fn live_row(w: &WorkerView) -> [String; 6] {
    let models: Vec<String> = w
        .report
        .models
        .iter()
        .map(|m| format!("{}:{}", m.name, m.version))
        .collect();
    [
        w.info.id.clone(),
        w.state.as_str().to_owned(),
        format!("{:.1}s", w.last_seen_ms as f64 / 1000.0),
        w.info.advertise.clone(),
        w.report.in_flight.to_string(),
        models.join(","),
    ]
}

/// A worker as the store knows it offline: only whether it was removed.
fn stored_row(w: &WorkerRecord) -> [String; 6] {
    let state = match w.removed_at {
        None => "registered",
        Some(_) => "removed",
    };
    [
        w.id.clone(),
        state.to_owned(),
        "-".to_owned(),
        w.advertise.clone(),
        "-".to_owned(),
        String::new(),
    ]
}
