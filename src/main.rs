//! The `toolgate` binary: `toolgate [--config FILE]` runs the gateway;
//! `toolgate check-config FILE` validates a configuration file; `toolgate audit verify FILE`
//! checks an audit export offline; `toolgate keys rotate` replaces the master key;
//! `toolgate backup DEST` copies the embedded store while it runs.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's malloc: under load about 15 % of toolgate's CPU samples were in
/// glibc's malloc and free (perf, `benches/load.sh` at 32 connections); with mimalloc a call
/// costs a fifth less CPU (BENCHMARKS.md, 2026-11-24).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "toolgate", version, about = "A high-performance MCP gateway on Pingora")]
struct Cli {
    /// Configuration file.
    #[arg(long, short, global = true, default_value = "conf/toolgate.yaml")]
    config: PathBuf,
    /// Take over the listening sockets of a running toolgate: start this, then send SIGQUIT to
    /// the running one (see `server.upgrade_sock`).
    #[arg(long, short)]
    upgrade: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validates a configuration file and exits non-zero naming the offending field.
    CheckConfig { file: PathBuf },
    /// The audit trail, offline.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// The master key that seals app credentials and the other secrets at rest.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Copies the embedded store (its database, the audit checkpoints kept beside it, the master
    /// key file) into a new directory while toolgate runs; a new instance starts from it.
    Backup { dest: PathBuf },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Seals every sealed value under a new master key, with toolgate stopped; run it again to
    /// finish a rotation that was stopped midway (docs/operations.md).
    Rotate {
        /// The new key, 64 hex characters (required when the key is `TOOLGATE_SECRET_KEY`);
        /// without it the embedded store gets a random one.
        #[arg(long)]
        new_key_file: Option<PathBuf>,
        /// Stops, as a crash would, after this many records (tests of a resumed rotation).
        #[arg(long, hide = true)]
        stop_after: Option<u64>,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Checks an export of `GET /v1/audit/export`: sequence, links, hashes, the checkpoints'
    /// heads and their chain, their signatures under `--public-key`, no entry past the last
    /// checkpoint by more than its interval, and the anchors. Exits 0 when a key vouches for
    /// it, 1 naming the first break (or when no key was given: a partial check vouches for
    /// nothing), 2 when a file or key cannot be read.
    Verify {
        file: PathBuf,
        /// The Ed25519 public key of the checkpoints (`GET /v1/audit/key`, or the start's log
        /// line): base64, 64 hex characters, a file holding either, or the route's JSON answer.
        /// Repeat it for an export signed under several keys.
        #[arg(long)]
        public_key: Vec<String>,
        /// Checkpoints kept outside the store (process-log lines, `audit.checkpoint` webhook
        /// bodies, or checkpoint JSON, one a line): each of the organisation's must be in the
        /// export.
        #[arg(long)]
        anchor: Option<PathBuf>,
        /// The environment variable holding the checkpoint key (`audit.checkpoint_key_env`).
        #[arg(long, conflicts_with = "master_key_env")]
        key_env: Option<String>,
        /// The environment variable holding the master key (64 hex characters, as
        /// `TOOLGATE_SECRET_KEY`), when the checkpoints are signed with the key derived from it.
        #[arg(long)]
        master_key_env: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::CheckConfig { file }) => check_config(&file),
        Some(Command::Audit {
            command: AuditCommand::Verify { file, public_key, anchor, key_env, master_key_env },
        }) => verify_audit(&file, &public_key, anchor.as_deref(), key_env.as_deref(), master_key_env.as_deref()),
        Some(Command::Keys { command: KeysCommand::Rotate { new_key_file, stop_after } }) => {
            rotate_keys(&cli.config, new_key_file.as_deref(), stop_after)
        }
        Some(Command::Backup { dest }) => backup(&cli.config, &dest),
        None => {
            let code = toolgate::run::run(&cli.config, cli.upgrade);
            // Lines logged before a failed start are still in memory.
            toolgate::observe::logging::flush();
            code
        }
    }
}

/// `toolgate check-config`: 0 for a file the server would start on (its TLS files too: the
/// start refuses a certificate that does not parse), with a warning on standard error for what
/// would fail later on this machine (`config::warnings`); 2 naming the offending field.
fn check_config(file: &std::path::Path) -> ExitCode {
    let loaded = toolgate::config::Config::load(file)
        .and_then(|c| toolgate::edge::tls::EdgeTls::for_server(&c.server).map(|_| c).map_err(Into::into));
    match loaded {
        Ok(config) => {
            for warning in toolgate::config::warnings(&config) {
                eprintln!("{}: warning: {warning}", file.display());
            }
            println!("{}: ok", file.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: {e}", file.display());
            ExitCode::from(2)
        }
    }
}

/// `toolgate audit verify`: 0 with a summary when a key vouched for the export, 1 naming the
/// first break or saying the check was partial (no key), 2 when a file or a key cannot be read.
fn verify_audit(
    file: &std::path::Path,
    public_keys: &[String],
    anchor: Option<&std::path::Path>,
    key_env: Option<&str>,
    master_key_env: Option<&str>,
) -> ExitCode {
    use toolgate::data::audit::{chain, signing, verify};
    let key = match (key_env, master_key_env) {
        (Some(var), _) => match std::env::var(var) {
            Ok(k) => Some(k.into_bytes()),
            Err(_) => return usage_error(&format!("the environment variable `{var}` is not set")),
        },
        (None, Some(var)) => {
            let master = std::env::var(var).ok().and_then(|h| hex::decode(h.trim()).ok()).filter(|b| b.len() == 32);
            let Some(master) = master else {
                return usage_error(&format!("`{var}` must hold the master key, 64 hex characters"));
            };
            Some(chain::derived_key(&master).to_vec())
        }
        (None, None) => None,
    };
    let mut keys = Vec::new();
    for given in public_keys {
        let text = match std::path::Path::new(given).is_file() {
            true => match std::fs::read_to_string(given) {
                Ok(t) => t,
                Err(e) => return usage_error(&format!("{given}: {e}")),
            },
            false => given.clone(),
        };
        match signing::parse_public_key(&text) {
            Ok(k) => keys.push(k),
            Err(e) => return usage_error(&format!("--public-key {given}: {e}")),
        }
    }
    let anchors = match anchor.map(std::fs::read_to_string).transpose() {
        Ok(text) => text.map(|t| verify::read_anchors(&t)).unwrap_or_default(),
        Err(e) => return usage_error(&format!("--anchor: {e}")),
    };
    if anchor.is_some() && anchors.is_empty() {
        return usage_error("--anchor: the file holds no checkpoint");
    }
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => return usage_error(&format!("{}: {e}", file.display())),
    };
    let opts = verify::Options { mac_key: key.as_deref(), public_keys: &keys, anchors: &anchors };
    match verify::verify_export(&text, &opts) {
        Ok(r) => report_verified(file, &r),
        Err(broken) => {
            eprintln!("{}: broken at {broken}", file.display());
            ExitCode::from(1)
        }
    }
}

/// The summary of an export that passed; exit 1 when no key vouched for it.
fn report_verified(file: &std::path::Path, r: &toolgate::data::audit::verify::Report) -> ExitCode {
    let v = &r.chain;
    let last = &r.last.checkpoint;
    let signed_at = chrono::DateTime::from_timestamp_millis(last.at).map(|t| t.to_rfc3339()).unwrap_or_default();
    let checked = match (r.signatures, v.macs_checked) {
        (0, false) => "no signature or MAC checked".to_string(),
        (0, true) => "MACs verified".to_string(),
        (n, macs) => format!("{n} signatures verified{}", if macs { ", MACs verified" } else { "" }),
    };
    println!(
        "{}: ok: organisation {}, {} entries (seq 1..{}), head {}; {} checkpoints ({checked}), the last signing seq {} at {signed_at}; {} entries after it; {} anchors found",
        file.display(),
        v.org_id.as_deref().unwrap_or("-"),
        v.entries,
        v.entries,
        v.head_hash,
        v.checkpoints,
        last.seq,
        r.unsigned_tail,
        r.anchors,
    );
    if r.vouched {
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "{}: partial verification: the links, hashes and checkpoint chain hold, but without --public-key (or the \
         checkpoint key) nothing shows these checkpoints are toolgate's: anyone able to edit the export could have \
         re-hashed it. Not vouched for (exit 1).",
        file.display()
    );
    ExitCode::from(1)
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("toolgate audit verify: {message}");
    ExitCode::from(2)
}

/// `toolgate keys rotate`: 0 once every value is sealed under the new key and the key is in
/// place, 1 naming what stopped it (run it again to finish).
fn rotate_keys(config: &std::path::Path, new_key_file: Option<&std::path::Path>, stop_after: Option<u64>) -> ExitCode {
    use toolgate::server::keys::{rotate, Installed, RotateOptions};
    match rotate(&RotateOptions { config, new_key_file, stop_after }) {
        Ok(done) => {
            let r = done.resealed;
            println!(
                "sealed {} values of {} records anew ({} records were under the new key already)",
                r.values, r.records, r.already
            );
            match done.installed {
                Installed::File(path) => println!("the master key is now the new one, in {}", path.display()),
                Installed::Environment => println!(
                    "give every instance the new key as TOOLGATE_SECRET_KEY (and no TOOLGATE_SECRET_KEY_PREVIOUS)"
                ),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolgate keys rotate: {e}");
            ExitCode::from(1)
        }
    }
}

/// `toolgate backup DEST`: 0 with the files copied, 1 naming what failed.
fn backup(config: &std::path::Path, dest: &std::path::Path) -> ExitCode {
    match toolgate::server::backup::backup(config, dest) {
        Ok(done) => {
            println!("{}: {}", dest.display(), done.files.join(", "));
            if done.key_in_environment {
                println!("the master key is TOOLGATE_SECRET_KEY and is not copied: keep it with the backup's owner");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("toolgate backup: {e}");
            ExitCode::from(1)
        }
    }
}
