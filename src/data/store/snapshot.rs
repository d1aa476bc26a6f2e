//! A consistent copy of the embedded store taken while an instance writes to it
//! (`toolgate backup`).
//!
//! Why `VACUUM INTO` rather than SQLite's page-by-page backup API: the copy is made inside one
//! read transaction, so it is the database as of one commit however busy the instance is (in
//! WAL mode a reader neither blocks the writer nor is blocked by it), whereas the backup API
//! starts over whenever another connection writes between its steps and, under a steady load,
//! may never end. The copy is also compacted. It runs in the calling process, on a connection
//! of its own, so the running instance is not asked anything.

use super::{embedded::DB_FILE, StoreError};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::time::Duration;

/// How long the copy waits for the database when a checkpoint holds it.
const BUSY_WAIT: Duration = Duration::from_secs(30);

/// Copies the store of `dir` (`storage.path`) into `dest`, a file that must not exist yet,
/// made owner-only and synced before this returns.
pub(crate) fn copy_database(dir: &Path, dest: &Path) -> Result<(), StoreError> {
    let fail = |what: &Path, e: &dyn std::fmt::Display| StoreError::Backend(format!("{}: {e}", what.display()));
    let source = dir.join(DB_FILE);
    // Not created when missing: a wrong `storage.path` is an error, not an empty backup.
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(&source, flags).map_err(|e| fail(&source, &e))?;
    conn.busy_timeout(BUSY_WAIT).map_err(|e| fail(&source, &e))?;
    // An empty owner-only file first: `VACUUM INTO` writes into an empty file, keeping its mode.
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(dest).map_err(|e| fail(dest, &e))?;
    }
    let target = dest.to_str().ok_or_else(|| fail(dest, &"the path is not UTF-8"))?;
    conn.execute("VACUUM INTO ?1", [target]).map_err(|e| fail(dest, &e))?;
    std::fs::File::open(dest).and_then(|f| f.sync_all()).map_err(|e| fail(dest, &e))
}
