//! The `toolgate` binary: `toolgate [--config FILE]` runs the gateway;
//! `toolgate check-config FILE` validates a configuration file.
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        // The TLS files too: the start would refuse a certificate that does not parse.
        Some(Command::CheckConfig { file }) => match toolgate::config::Config::load(&file)
            .and_then(|c| toolgate::edge::tls::EdgeTls::for_server(&c.server).map(|_| ()).map_err(Into::into))
        {
            Ok(()) => {
                println!("{}: ok", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                ExitCode::from(2)
            }
        },
        None => {
            let code = toolgate::run::run(&cli.config, cli.upgrade);
            // Lines logged before a failed start are still in memory.
            toolgate::observe::logging::flush();
            code
        }
    }
}
