//! What every test of the `nexo` binary shares: the binary with an
//! environment that no outside `NEXO_*` setting leaks into, and its output
//! as text.
#![allow(dead_code)] // each test binary uses a different part

use std::path::Path;
use std::process::{Command, Output};

/// The `nexo` binary with its compile cache in `cache`, runs recorded in a
/// store beside it (never the user's), and no model, provider, base URL,
/// config file or log filter from the environment.
pub fn nexo_command(cache: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nexo"));
    cmd.env("NEXO_CACHE_DIR", cache)
        .env("NEXO_STORE", cache.with_extension("store.db"))
        .env_remove("NEXO_LOG")
        .env_remove("NEXO_MODEL")
        .env_remove("NEXO_PROVIDER")
        .env_remove("NEXO_BASE_URL")
        .env_remove("NEXO_CONFIG");
    cmd
}

/// A process's stdout, decoded lossily.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A process's stderr, decoded lossily.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh PostgreSQL database for one test, from `NEXO_TEST_POSTGRES`; or
/// `None` (and the test says it skipped) outside CI.
pub async fn postgres_database(test: &str) -> Option<String> {
    let Some(admin) = std::env::var("NEXO_TEST_POSTGRES").ok().filter(|v| !v.is_empty()) else {
        assert!(
            std::env::var("CI").map(|v| v.is_empty()).unwrap_or(true),
            "{test}: CI is set but NEXO_TEST_POSTGRES is not: PostgreSQL is required in CI (scripts/postgres.sh)"
        );
        println!("skipped: NEXO_TEST_POSTGRES is unset, so the PostgreSQL half of {test} did not run");
        eprintln!("skipped: NEXO_TEST_POSTGRES is unset, so the PostgreSQL half of {test} did not run");
        return None;
    };
    use sqlx::Connection;
    let name = format!("nexo_test_{}_{}", std::process::id(), nexo_store::new_run_id());
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await.unwrap();
    let (base, _) = admin.rsplit_once('/').unwrap();
    Some(format!("{base}/{name}"))
}
