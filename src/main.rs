//! The `toolgate` binary: `toolgate [--config FILE]` runs the gateway;
//! `toolgate check-config FILE` validates a configuration file; `toolgate audit verify FILE`
//! checks an audit export offline.
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
    #[arg(long, short, default_value = "conf/toolgate.yaml")]
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
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Checks an export of `GET /v1/audit/export`: sequence, links, hashes, and the checkpoints'
    /// heads (their MACs too with a key). Exits 0 with a summary, 1 naming the first broken
    /// entry, 2 when the file or key cannot be read.
    Verify {
        file: PathBuf,
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
        Some(Command::Audit { command: AuditCommand::Verify { file, key_env, master_key_env } }) => {
            verify_audit(&file, key_env.as_deref(), master_key_env.as_deref())
        }
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

/// `toolgate audit verify`: 0 with a summary, 1 naming the first broken entry, 2 when the file
/// or the key cannot be read.
fn verify_audit(file: &std::path::Path, key_env: Option<&str>, master_key_env: Option<&str>) -> ExitCode {
    use toolgate::data::audit::chain;
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
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => return usage_error(&format!("{}: {e}", file.display())),
    };
    match chain::verify(&text, key.as_deref()) {
        Ok(v) => {
            let macs = if v.macs_checked { "MACs verified" } else { "MACs not checked (no key)" };
            println!(
                "{}: ok: organisation {}, {} entries (seq 1..{}), head {}; {} checkpoints ({macs}), the last signing seq {}",
                file.display(),
                v.org_id.as_deref().unwrap_or("-"),
                v.entries,
                v.entries,
                v.head_hash,
                v.checkpoints,
                v.signed_seq
            );
            ExitCode::SUCCESS
        }
        Err(broken) => {
            eprintln!("{}: broken at {broken}", file.display());
            ExitCode::from(1)
        }
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("toolgate audit verify: {message}");
    ExitCode::from(2)
}
