//! Taking over from a running toolgate without dropping a request (`toolgate --upgrade`).
//!
//! Pingora does the socket part: the new process, started with `--upgrade`, waits on
//! `server.upgrade_sock`; the old one, on SIGQUIT, sends it the listening sockets, keeps
//! accepting for Pingora's close timeout (5 s) while the new one starts, then stops accepting
//! and lets its in-flight requests and streams finish within `server.grace_period_secs`. No
//! connection is refused: both processes accept from the same sockets while they overlap.
//!
//! This module does the record part, for the embedded store, which two processes then share:
//! * every process holds an exclusive lock on `instance.lock` in the store's directory while it
//!   runs, so a second process on the same directory without `--upgrade` is refused (its
//!   in-memory records would silently diverge from the first one's);
//! * a process started with `--upgrade` serves at once, adopts MCP sessions it does not know
//!   from the store (the old process may have created them after the new one loaded its
//!   records), and when the old process has exited (its lock is free) reads every record again,
//!   so that what the old process acknowledged during the overlap is seen here too.
//!
//! On Redis the instances already share records and sessions; only the sockets move.

use crate::config::StorageConfig;
use crate::data::state::State;
use async_trait::async_trait;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error(
        "storage.path {0} is in use by another toolgate process; stop it first, or start this one with --upgrade \
         and send SIGQUIT to the running one to take over its sockets"
    )]
    InUse(PathBuf),
}

/// This process's claim on the embedded store's directory.
pub(crate) enum Claim {
    /// Redis: instances share the store by design.
    Shared,
    /// The lock is held for the process's life.
    Held(File),
    /// `--upgrade` while the old process still holds the lock: [`Takeover`] waits for it.
    Waiting(File),
}

/// Takes the instance lock of the embedded store (see the module's comment).
pub(crate) fn claim(storage: &StorageConfig, upgrading: bool) -> Result<Claim, UpgradeError> {
    let StorageConfig::Embedded { path } = storage else { return Ok(Claim::Shared) };
    // The store creates its directory owner-only too; the lock is taken before the store opens.
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(path)
        .map_err(|source| UpgradeError::Open { path: path.clone(), source })?;
    let lock_path = path.join("instance.lock");
    let file = open_lock(&lock_path)?;
    match file.try_lock() {
        Ok(()) => Ok(Claim::Held(file)),
        Err(TryLockError::WouldBlock) if upgrading => Ok(Claim::Waiting(file)),
        Err(TryLockError::WouldBlock) => Err(UpgradeError::InUse(path.clone())),
        Err(TryLockError::Error(source)) => Err(UpgradeError::Open { path: lock_path, source }),
    }
}

fn open_lock(path: &Path) -> Result<File, UpgradeError> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).write(true);
    // Owner-only like every file of the store's directory.
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path).map_err(|source| UpgradeError::Open { path: path.to_path_buf(), source })
}

/// How often the records are read again while an old and a new process both answer.
const OVERLAP_RESYNC: std::time::Duration = std::time::Duration::from_millis(500);

async fn resync(state: &State) {
    if let Err(e) = state.reload().await {
        tracing::warn!(error = %e, "could not read the records again during an upgrade");
    }
}

/// Waits for the old process to exit (its lock to be free), then reads every record again.
pub(crate) struct Takeover {
    pub lock: parking_lot::Mutex<Option<File>>,
    pub state: Arc<State>,
}

#[async_trait]
impl pingora::services::background::BackgroundService for Takeover {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let Some(file) = self.lock.lock().take() else { return };
        let mut locked = tokio::task::spawn_blocking(move || file.lock().map(|()| file));
        // While both processes answer, each reads the records again every OVERLAP_RESYNC, so a
        // gateway or key the other one made is known here within that time.
        let held = loop {
            tokio::select! {
                locked = &mut locked => break locked,
                _ = tokio::time::sleep(OVERLAP_RESYNC) => resync(&self.state).await,
                _ = shutdown.changed() => return,
            }
        };
        let _held = match held {
            Ok(Ok(file)) => file,
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot wait for the previous process's store lock");
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "the wait for the previous process's store lock failed");
                return;
            }
        };
        match self.state.reload().await {
            Ok(()) => tracing::info!("the previous process has exited; records read again from the store"),
            Err(e) => {
                tracing::error!(error = %e, "the previous process has exited, but the records could not be read again")
            }
        }
        // The lock is this process's now, for as long as it runs.
        let _ = shutdown.changed().await;
    }
}

/// On SIGQUIT (Pingora hands the sockets over and this process keeps accepting for a few
/// seconds beside the new one): from then on, sessions the new process makes are read from the
/// store when their requests land here, and the records are read again every
/// `OVERLAP_RESYNC` until this process stops.
pub(crate) struct Handover {
    pub server: Arc<crate::server::Server>,
}

#[async_trait]
impl pingora::services::background::BackgroundService for Handover {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let mut quit = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::quit()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGQUIT; sessions made by an upgrading process may be unknown here");
                return;
            }
        };
        tokio::select! {
            _ = quit.recv() => {
                self.server.mcp.sessions.adopt_unknown();
                tracing::info!("SIGQUIT: handing the listening sockets over to the new process");
            }
            _ = shutdown.changed() => return,
        }
        // Pingora keeps accepting beside the new process for its close timeout, then announces
        // the shutdown (no more accepts): until then the other process may make records.
        loop {
            tokio::select! {
                _ = tokio::time::sleep(OVERLAP_RESYNC) => resync(&self.server.state).await,
                _ = shutdown.changed() => return,
            }
        }
    }
}
