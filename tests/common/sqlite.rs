//! SQLite files for the tests: each test gets a fresh file of its own in a
//! temporary directory, migrated by the application or the store itself.

use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The URL of a new, empty database file.
pub fn fresh_database() -> String {
    let dir = std::env::temp_dir().join("onejob-test-sqlite");
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let name = format!(
        "{}-{}-{}.db",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        &uuid::Uuid::now_v7().simple().to_string()[24..]
    );
    format!("sqlite://{}", dir.join(name).display())
}
