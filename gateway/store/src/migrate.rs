//! Schema migrations: numbered `.sql` files from `migrations/`, compiled into the binary,
//! applied in order at start, each inside its own transaction and recorded in the database.

use rusqlite::{params, Connection};

/// Every migration, in order. The number is the file's prefix; never renumber or edit an
/// applied file, add a new one.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "0001_init.sql",
        include_str!("../../../migrations/0001_init.sql"),
    ),
    (
        2,
        "0002_rate_limits.sql",
        include_str!("../../../migrations/0002_rate_limits.sql"),
    ),
    (
        3,
        "0003_plugins.sql",
        include_str!("../../../migrations/0003_plugins.sql"),
    ),
    (
        4,
        "0004_workers.sql",
        include_str!("../../../migrations/0004_workers.sql"),
    ),
    (
        5,
        "0005_traffic.sql",
        include_str!("../../../migrations/0005_traffic.sql"),
    ),
    (
        6,
        "0006_guardrail_plugins.sql",
        include_str!("../../../migrations/0006_guardrail_plugins.sql"),
    ),
    (
        7,
        "0007_key_guardrails.sql",
        include_str!("../../../migrations/0007_key_guardrails.sql"),
    ),
    (
        8,
        "0008_key_payload_log.sql",
        include_str!("../../../migrations/0008_key_payload_log.sql"),
    ),
    (
        9,
        "0009_shared_settings.sql",
        include_str!("../../../migrations/0009_shared_settings.sql"),
    ),
];

pub fn apply(conn: &mut Connection) -> Result<Vec<i64>, String> {
    apply_list(conn, MIGRATIONS)
}

pub(crate) fn apply_list(
    conn: &mut Connection,
    list: &[(i64, &str, &str)],
) -> Result<Vec<i64>, String> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
    )
    .map_err(|e| format!("creating schema_migrations: {e}"))?;
    let mut applied = Vec::new();
    for &(version, name, sql) in list {
        let done: bool = conn
            .query_row(
                "SELECT EXISTS(SELECT 1 FROM schema_migrations WHERE version = ?1)",
                [version],
                |r| r.get(0),
            )
            .map_err(|e| format!("reading schema_migrations: {e}"))?;
        if done {
            continue;
        }
        // A failing migration rolls back whole: the transaction is dropped without commit.
        let tx = conn.transaction().map_err(|e| e.to_string())?;
        tx.execute_batch(sql)
            .map_err(|e| format!("migration {name} failed: {e}"))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, strftime('%s','now'))",
            params![version, name],
        )
        .map_err(|e| format!("recording migration {name}: {e}"))?;
        tx.commit()
            .map_err(|e| format!("committing migration {name}: {e}"))?;
        applied.push(version);
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_once_and_a_failed_migration_changes_nothing() {
        let mut conn = Connection::open_in_memory().unwrap();
        let all: Vec<i64> = MIGRATIONS.iter().map(|m| m.0).collect();
        assert_eq!(apply(&mut conn).unwrap(), all);
        assert!(apply(&mut conn).unwrap().is_empty());

        let broken: &[(i64, &str, &str)] = &[(
            999,
            "0999_broken.sql",
            "CREATE TABLE t2 (x INTEGER); SELEC oops;",
        )];
        let err = apply_list(&mut conn, broken).unwrap_err();
        assert!(err.contains("0999_broken.sql"), "{err}");
        let t2: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 't2'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(t2, 0, "the half-applied table must be rolled back");
        let recorded: i64 = conn
            .query_row(
                "SELECT count(*) FROM schema_migrations WHERE version = 999",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(recorded, 0);
    }
}
