//! `toolgate backup DEST`: a copy of the embedded store taken while toolgate runs, which a new
//! instance starts from (its `storage.path` pointed at the copy, or the copy's files put in
//! place while toolgate is stopped; `docs/operations.md`).
//!
//! The order matters. The last audit checkpoint this instance signed (`audit-checkpoints.json`)
//! is copied before the database: it is written only once its checkpoint is in the store, so the
//! database copied after it holds that checkpoint, and the restored instance finds its chain
//! extending the kept one (copied the other way round, a checkpoint signed in between would be
//! missing from the copy and the instance would report its chain as tampered with). The master
//! key is copied last: without it the sealed credentials in the copy open under no key.

use crate::base::secrets;
use crate::config::{Config, ConfigError, StorageConfig};
use crate::data::store::{snapshot, StoreError, DB_FILE};
use crate::server::AUDIT_KEPT_FILE;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("{0} is not empty: a backup goes into a new or empty directory")]
    NotEmpty(PathBuf),
    #[error(
        "storage.backend is redis: back Redis up with its own snapshot (BGSAVE, then copy dump.rdb), \
         as docs/operations.md describes"
    )]
    Redis,
}

/// What a backup copied into its directory.
pub struct Backup {
    pub files: Vec<&'static str>,
    /// The master key is `TOOLGATE_SECRET_KEY`, which is not copied: keep it apart.
    pub key_in_environment: bool,
}

/// Copies the store of the configuration at `config` into the directory `dest` (made
/// owner-only; it must be new or empty).
pub fn backup(config: &Path, dest: &Path) -> Result<Backup, BackupError> {
    let config = Config::load(config)?;
    let StorageConfig::Embedded { path: dir } = &config.storage else { return Err(BackupError::Redis) };
    let io = |e: std::io::Error| BackupError::Io(dest.to_path_buf(), e);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dest).map_err(io)?;
    }
    if std::fs::read_dir(dest).map_err(io)?.next().is_some() {
        return Err(BackupError::NotEmpty(dest.to_path_buf()));
    }
    let mut files = Vec::new();
    if copy_if_present(&dir.join(AUDIT_KEPT_FILE), &dest.join(AUDIT_KEPT_FILE))? {
        files.push(AUDIT_KEPT_FILE);
    }
    snapshot::copy_database(dir, &dest.join(DB_FILE))?;
    files.push(DB_FILE);
    let key_in_environment = std::env::var_os(secrets::KEY_ENV).is_some();
    if !key_in_environment {
        for name in [secrets::KEY_FILE, secrets::NEXT_KEY_FILE] {
            if copy_if_present(&dir.join(name), &dest.join(name))? {
                files.push(name);
            }
        }
    }
    secrets::sync_parent(&dest.join(DB_FILE)).map_err(io)?;
    Ok(Backup { files, key_in_environment })
}

/// Copies `from` to `to` (owner-only, synced); `false` when there is no `from`.
fn copy_if_present(from: &Path, to: &Path) -> Result<bool, BackupError> {
    let bytes = match std::fs::read(from) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(BackupError::Io(from.to_path_buf(), e)),
    };
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
        .map_err(|e| BackupError::Io(to.to_path_buf(), e))?;
    f.write_all(&bytes).and_then(|()| f.sync_all()).map_err(|e| BackupError::Io(to.to_path_buf(), e))?;
    Ok(true)
}
