//! `toolgate keys rotate`: the master key replaced by a new one, every value sealed under it
//! (app credentials, OAuth tokens, webhook secrets, Slack URLs, TOTP seeds) sealed anew.
//!
//! It runs with toolgate stopped: a running instance keeps its records in memory and would
//! write values sealed under the old key back over the rotated ones. On the embedded store the
//! instance lock says whether one runs; on Redis the operator stops every instance.
//!
//! Crash safety: the new key is written first, beside the current one (`secret.key.next`);
//! while it is there toolgate seals under it and opens under either key. Each record is
//! rewritten on its own, so a rotation stopped anywhere is finished by running it again (what is
//! under the new key already is skipped). Only when every record is done does the new key
//! replace the current one (a rename). With the key in `TOOLGATE_SECRET_KEY` the new key comes
//! from a file and the operator then gives it to every instance in place of the old one.

use crate::base::secrets::{self, SealError, Sealer};
use crate::config::{Config, ConfigError, StorageConfig};
use crate::data::rekey::{self, RekeyError, Resealed};
use crate::data::store::{Kind, StoreError};
use crate::server::upgrade::{self, UpgradeError};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    InUse(#[from] UpgradeError),
    #[error(transparent)]
    Key(#[from] SealError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Rekey(#[from] RekeyError),
    #[error(
        "a rotation to another key is under way ({0}); run `toolgate keys rotate` without --new-key-file, \
         or with that key, to finish it first"
    )]
    OtherRotation(PathBuf),
    #[error("--new-key-file: {0} holds no key")]
    NoNewKey(PathBuf),
    #[error(
        "--new-key-file is required when the master key is TOOLGATE_SECRET_KEY: the new key (64 hex \
         characters) is read from it, and given to every instance once the rotation is done"
    )]
    NewKeyRequired,
    #[error("the new key is the current master key: nothing to rotate")]
    SameKey,
    #[error("no master key at {0}: nothing is sealed yet")]
    NoKey(PathBuf),
    #[error("cannot start the rotation's runtime: {0}")]
    Runtime(std::io::Error),
}

/// What `toolgate keys rotate` was asked.
pub struct RotateOptions<'a> {
    pub config: &'a Path,
    /// The new key (64 hex characters); made at random when absent on the embedded store.
    pub new_key_file: Option<&'a Path>,
    /// Stop, as a crash would, after this many records (the test of a rotation stopped midway).
    pub stop_after: Option<u64>,
}

/// Where the new key went once every value was sealed under it.
pub enum Installed {
    /// Renamed over `secret.key`.
    File(PathBuf),
    /// The operator gives it to every instance as `TOOLGATE_SECRET_KEY`.
    Environment,
}

pub struct Rotated {
    pub resealed: Resealed,
    pub installed: Installed,
}

/// The two keys of a rotation and how it ends.
struct Plan {
    sealer: Sealer,
    /// `(secret.key.next, secret.key)` on the embedded store with its key in a file.
    rename: Option<(PathBuf, PathBuf)>,
}

/// Seals every sealed value under the new key, then installs it (see the module's comment).
pub fn rotate(opts: &RotateOptions<'_>) -> Result<Rotated, KeysError> {
    let config = Config::load(opts.config)?;
    // Held until the rotation ends: no instance starts on the directory meanwhile.
    let _claim = upgrade::claim(&config.storage, false)?;
    let plan = plan(&config.storage, opts.new_key_file)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(KeysError::Runtime)?;
    let resealed = runtime.block_on(async {
        let store = crate::data::store::open(&config.storage)?;
        let progress = |kind: Kind, id: &str| eprintln!("sealed anew: {} {id}", kind.as_str());
        Ok::<_, KeysError>(rekey::reseal_all(&*store, &plan.sealer, opts.stop_after, progress).await?)
    })?;
    let installed = match plan.rename {
        Some((next, current)) => {
            let err = |e: std::io::Error| SealError::KeyFile(current.display().to_string(), e.to_string());
            std::fs::rename(&next, &current).map_err(err)?;
            secrets::sync_parent(&current).map_err(err)?;
            Installed::File(current)
        }
        None => Installed::Environment,
    };
    Ok(Rotated { resealed, installed })
}

fn plan(storage: &StorageConfig, new_key_file: Option<&Path>) -> Result<Plan, KeysError> {
    let given = match new_key_file {
        Some(path) => Some(secrets::read_key_file(path)?.ok_or_else(|| KeysError::NoNewKey(path.to_path_buf()))?),
        None => None,
    };
    let dir = match storage {
        StorageConfig::Embedded { path } if std::env::var_os(secrets::KEY_ENV).is_none() => path,
        _ => {
            let current = secrets::parse_key(&std::env::var(secrets::KEY_ENV).unwrap_or_default(), secrets::KEY_ENV)?;
            let new = given.ok_or(KeysError::NewKeyRequired)?;
            if new == current {
                return Err(KeysError::SameKey);
            }
            return Ok(Plan { sealer: Sealer::rotating(new, current), rename: None });
        }
    };
    let current_path = dir.join(secrets::KEY_FILE);
    let current = secrets::read_key_file(&current_path)?.ok_or_else(|| KeysError::NoKey(current_path.clone()))?;
    let next_path = dir.join(secrets::NEXT_KEY_FILE);
    let next = match (secrets::read_key_file(&next_path)?, given) {
        (Some(staged), Some(new)) if staged != new => return Err(KeysError::OtherRotation(next_path)),
        (Some(staged), _) => staged,
        (None, given) => {
            let new = given.unwrap_or_else(secrets::new_master_key);
            if new == current {
                return Err(KeysError::SameKey);
            }
            secrets::write_key_file(&next_path, &new)?;
            new
        }
    };
    Ok(Plan { sealer: Sealer::rotating(next, current), rename: Some((next_path, current_path)) })
}
