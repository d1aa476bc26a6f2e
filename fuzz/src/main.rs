//! The fuzz driver (`fuzz/README.md`): runs each target for a fixed time with mutated inputs,
//! and fails on a panic, an allocation beyond the per-input bound, a stack overflow or a hang.
//!
//! ```text
//! toolgate-fuzz run [--seconds N] [--seed S] [--target NAME]... [--out DIR]
//! toolgate-fuzz reproduce TARGET FILE...
//! ```
//!
//! `run` is a supervisor: each target runs in a child process (`worker`), so that an abort (the
//! allocation bound is enforced by the global allocator, and a failed allocation aborts the
//! process, as does a stack overflow) or a hang is seen from outside. The worker is fast: it
//! does not write inputs anywhere. When it dies, the supervisor runs it again with the same seed
//! (`--replay`): generation is deterministic, so the same inputs come in the same order, and
//! this time each is written to `pending` before it runs; the one that kills the replay is kept.
#![forbid(unsafe_code)]

use cap::Cap;
use std::alloc::System;
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use toolgate_fuzz::targets::Features;
use toolgate_fuzz::{allocation_bound, fnv1a, mutate, read_dir_sorted, seeds, target, targets, Target};

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

/// Stack of the thread that runs the targets: tokio's default for worker threads, which is
/// where the server parses requests.
const WORKER_STACK: usize = 2 * 1024 * 1024;
/// Inputs kept in memory per target; a full corpus replaces a random entry.
const MAX_CORPUS: usize = 4096;
/// A worker that prints nothing for this long is stuck on one input.
const HANG: Duration = Duration::from_secs(20);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => supervise(&args[1..]),
        Some("worker") => worker(&args[1..]),
        Some("reproduce") => reproduce(&args[1..]),
        _ => Err(format!(
            "usage: toolgate-fuzz run [--seconds N] [--seed S] [--target NAME]... [--out DIR]\n       \
             toolgate-fuzz reproduce TARGET FILE...\ntargets: {}",
            targets().iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
        )),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("toolgate-fuzz: {e}");
            ExitCode::from(2)
        }
    }
}

/// The options both sides take.
struct Options {
    seconds: u64,
    seed: u64,
    targets: Vec<&'static Target>,
    out: PathBuf,
    replay: bool,
    /// A replay stops here at the latest: past the inputs the dead worker can have reached.
    max_execs: u64,
}

fn options(args: &[String]) -> Result<Options, String> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut o = Options {
        seconds: 30,
        seed: now,
        targets: Vec::new(),
        out: Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz"),
        replay: false,
        max_execs: u64::MAX,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--seconds" => o.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--seed" => o.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--out" => o.out = PathBuf::from(value()?),
            "--target" => {
                let name = value()?;
                o.targets.push(target(name).ok_or(format!("no target `{name}`"))?);
            }
            "--replay" => o.replay = true,
            "--max-execs" => o.max_execs = value()?.parse().map_err(|e| format!("--max-execs: {e}"))?,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if o.targets.is_empty() {
        o.targets = targets().iter().collect();
    }
    Ok(o)
}

// ---- supervisor -------------------------------------------------------------------------------

fn supervise(args: &[String]) -> Result<bool, String> {
    let o = options(args)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    println!("toolgate-fuzz: seed {}, {} s per target, findings and corpus in {}", o.seed, o.seconds, o.out.display());
    let mut ok = true;
    let mut lines = Vec::new();
    for t in &o.targets {
        let seed = o.seed ^ fnv1a(t.name.as_bytes());
        let mut cmd = Command::new(&exe);
        cmd.arg("worker").args(["--target", t.name, "--seconds", &o.seconds.to_string(), "--seed", &seed.to_string()]);
        cmd.arg("--out").arg(&o.out);
        let (status, last) = watch(cmd, t.name)?;
        let line = match status {
            Ended::Exited(0) => format!("{:<13} ok      {}", t.name, summary(&last)),
            Ended::Exited(1) => {
                ok = false;
                format!(
                    "{:<13} FAILED  a panic (input saved in {}) or retained memory, see above ({})",
                    t.name,
                    o.out.join("artifacts").join(t.name).display(),
                    summary(&last)
                )
            }
            Ended::Exited(code) => {
                ok = false;
                format!("{:<13} FAILED  the worker exited with {code} (its error is above)", t.name)
            }
            died => {
                ok = false;
                println!("{}: the worker {died}; replaying seed {seed} to find the input", t.name);
                format!("{:<13} FAILED  {}", t.name, replay(&exe, &o, t, seed, &died, &last)?)
            }
        };
        lines.push(line);
    }
    println!("\n---- toolgate-fuzz summary (seed {}) ----", o.seed);
    for l in &lines {
        println!("{l}");
    }
    Ok(ok)
}

enum Ended {
    Exited(i32),
    Signal(String),
    Hung,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Exited(c) => write!(f, "exited with {c}"),
            Ended::Signal(s) => {
                write!(f, "died ({s}: an allocation beyond the bound, or a stack overflow; see its stderr above)")
            }
            Ended::Hung => write!(f, "printed nothing for {} s (an input runs too long)", HANG.as_secs()),
        }
    }
}

/// Runs a worker, relaying its progress lines, and kills it if it goes quiet. Returns how it
/// ended and its last `key=value` line.
fn watch(mut cmd: Command, name: &str) -> Result<(Ended, String), String> {
    let mut child = cmd.stdout(Stdio::piped()).spawn().map_err(|e| format!("cannot start the worker: {e}"))?;
    let stdout = child.stdout.take().ok_or("no worker stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut last = String::new();
    let mut hung = false;
    loop {
        match rx.recv_timeout(HANG) {
            Ok(line) => {
                println!("{name}: {line}");
                if line.contains("execs=") {
                    last = line;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                hung = true;
                let _ = child.kill();
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    let ended = if hung {
        Ended::Hung
    } else {
        match status.code() {
            Some(c) => Ended::Exited(c),
            None => Ended::Signal(signal_name(&status)),
        }
    };
    Ok((ended, last))
}

fn signal_name(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(6) => "SIGABRT".into(),
        Some(11) => "SIGSEGV".into(),
        Some(9) => "SIGKILL".into(),
        Some(s) => format!("signal {s}"),
        None => status.to_string(),
    }
}

/// The worker died: run it again with the same seed, writing each input before it runs.
/// `last` is the worker's last progress line: the inputs it reached by then, and a second's worth
/// more, bound the replay, which is slower (it writes every input) and so is not timed.
fn replay(exe: &Path, o: &Options, t: &Target, seed: u64, first: &Ended, last: &str) -> Result<String, String> {
    let pending = o.out.join("artifacts").join(t.name).join("pending");
    let _ = std::fs::remove_file(&pending);
    let mut cmd = Command::new(exe);
    cmd.arg("worker").args(["--target", t.name, "--seed", &seed.to_string(), "--replay"]);
    let reached: u64 = last.split_whitespace().find_map(|w| w.strip_prefix("execs=")?.parse().ok()).unwrap_or(0);
    let max_execs = reached.saturating_mul(2).saturating_add(2_000_000);
    cmd.args(["--seconds", &(o.seconds * 20 + 60).to_string(), "--max-execs", &max_execs.to_string()]);
    cmd.arg("--out").arg(&o.out);
    let (again, _) = watch(cmd, t.name)?;
    let data = match (&again, std::fs::read(&pending)) {
        (Ended::Signal(_) | Ended::Hung, Ok(data)) => data,
        _ => return Ok(format!("worker {first}; the replay did not reproduce it ({again})")),
    };
    let kind = if matches!(again, Ended::Hung) { "hang" } else { "abort" };
    let file = pending.with_file_name(format!("{kind}-{:016x}", fnv1a(&data)));
    std::fs::rename(&pending, &file).map_err(|e| e.to_string())?;
    println!("{}: input that made the worker {again} ({} bytes): {}", t.name, data.len(), escape(&data));
    Ok(format!("worker {again}; input saved as {}", file.display()))
}

fn summary(last: &str) -> String {
    let field = |k: &str| last.split_whitespace().find_map(|w| w.strip_prefix(k)).unwrap_or("?").to_string();
    format!(
        "{} execs in {} s ({}/s), corpus {} -> {}, {} features, peak heap {} KiB",
        field("execs="),
        field("secs="),
        field("rate="),
        field("seeds="),
        field("corpus="),
        field("features="),
        field("peak_kib=")
    )
}

// ---- worker -----------------------------------------------------------------------------------

thread_local! {
    /// What the panic hook saw: message, location and backtrace of the last panic.
    static PANIC: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
    /// Whether a target is running: a panic anywhere else is the driver's own, and printed.
    static IN_TARGET: Cell<bool> = const { Cell::new(false) };
}

fn worker(args: &[String]) -> Result<bool, String> {
    let o = options(args)?;
    let t = *o.targets.first().ok_or("no target")?;
    panic::set_hook(Box::new(|info| {
        let location =
            info.location().map_or_else(String::new, |l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
        let report = format!("{info}\n{}", std::backtrace::Backtrace::force_capture());
        if IN_TARGET.with(Cell::get) {
            PANIC.with(|p| *p.borrow_mut() = Some((location, report)));
        } else {
            eprintln!("{report}");
        }
    }));
    let handle = std::thread::Builder::new()
        .name(format!("fuzz-{}", t.name))
        .stack_size(WORKER_STACK)
        .spawn(move || fuzz(t, &o))
        .map_err(|e| e.to_string())?;
    handle.join().map_err(|_| "the fuzz thread panicked outside a target".to_string())?
}

fn fuzz(t: &'static Target, o: &Options) -> Result<bool, String> {
    let (seconds, seed, replay, out) = (o.seconds, o.seed, o.replay, o.out.as_path());
    let found_dir = out.join("corpus").join(t.name);
    let artifacts = out.join("artifacts").join(t.name);
    std::fs::create_dir_all(&artifacts).map_err(|e| format!("{}: {e}", artifacts.display()))?;
    let mut corpus: Vec<Vec<u8>> =
        seeds(t).map_err(|e| format!("seeds of {}: {e}", t.name))?.into_iter().map(|s| s.1).collect();
    corpus.extend(read_dir_sorted(&found_dir).unwrap_or_default().into_iter().map(|s| s.1));
    corpus.retain(|c| c.len() <= t.max_len);
    let seeds = corpus.len();
    let mut pending = replay.then(|| artifacts.join("pending"));

    let mut seen: Features = [0; 64];
    let mut crashes = HashSet::new();
    let mut new_inputs = Vec::new();
    let mut retained: isize = 0;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut next_report = start + Duration::from_secs(1);
    let mut rng = mutate::Rng::new(seed);
    let mut execs: u64 = 0;
    let mut i = 0;
    loop {
        // The corpus first, as it is; then mutations of it.
        let input = if i < seeds {
            i += 1;
            corpus[i - 1].clone()
        } else if corpus.is_empty() {
            mutate::mutate(&mut rng, &[], &corpus, t)
        } else {
            let parent = &corpus[rng.below(corpus.len())];
            mutate::mutate(&mut rng, parent, &corpus, t)
        };
        if let Some(path) = &mut pending {
            write_now(path, &input)?;
        }
        execs += 1;
        match run_one(t, &input, &mut retained) {
            Ok(features) => {
                let new = features.iter().zip(&seen).any(|(f, s)| f & !s != 0);
                seen.iter_mut().zip(&features).for_each(|(s, f)| *s |= f);
                if new && i >= seeds {
                    if corpus.len() < MAX_CORPUS {
                        corpus.push(input.clone());
                    } else {
                        let r = rng.below(corpus.len());
                        corpus[r] = input.clone();
                    }
                    new_inputs.push(input);
                }
            }
            Err((location, report)) => {
                if crashes.insert(location.clone()) {
                    let file = artifacts.join(format!("crash-{:016x}", fnv1a(&input)));
                    std::fs::write(&file, &input).map_err(|e| e.to_string())?;
                    println!("PANIC at {location} on input ({} bytes) {}", input.len(), escape(&input));
                    println!(
                        "saved as {}; reproduce with: toolgate-fuzz reproduce {} {}",
                        file.display(),
                        t.name,
                        file.display()
                    );
                    println!("{}", report.lines().take(40).collect::<Vec<_>>().join("\n  "));
                }
            }
        }
        if execs >= o.max_execs {
            break;
        }
        if execs.is_multiple_of(64) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if now >= next_report {
                next_report = now + Duration::from_secs(1);
                println!("execs={execs} corpus={} features={}", corpus.len(), popcount(&seen));
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let retained = retained.max(0) as usize;
    if !replay {
        save_found(&found_dir, &new_inputs)?;
    }
    println!(
        "execs={execs} secs={:.0} rate={:.0} seeds={seeds} corpus={} features={} new={} crashes={} peak_kib={} retained_kib={}",
        secs,
        execs as f64 / secs,
        corpus.len(),
        popcount(&seen),
        new_inputs.len(),
        crashes.len(),
        ALLOC.max_allocated() / 1024,
        retained / 1024
    );
    let leak = retained > 64 * 1024 * 1024;
    if leak {
        println!("FAILED: the target kept {} MiB allocated after its inputs returned", retained >> 20);
    }
    Ok(crashes.is_empty() && !leak)
}

/// Runs one input under the allocation bound; its features, or the panic's location and report.
/// `retained` adds up what the target left allocated after it returned: growth over a run means
/// a cache or a leak that inputs can fill.
fn run_one(t: &Target, input: &[u8], retained: &mut isize) -> Result<Features, (String, String)> {
    let before = ALLOC.allocated();
    let _ = ALLOC.set_limit(before.saturating_add(allocation_bound(input.len())));
    IN_TARGET.with(|f| f.set(true));
    let r = panic::catch_unwind(AssertUnwindSafe(|| (t.run)(input)));
    IN_TARGET.with(|f| f.set(false));
    let _ = ALLOC.set_limit(usize::MAX);
    if r.is_ok() {
        // Not after a panic: capturing its backtrace loads symbol tables once for good.
        *retained += ALLOC.allocated() as isize - before as isize;
    }
    r.map_err(|_| PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| ("?".into(), "panic".into())))
}

fn popcount(f: &Features) -> u32 {
    f.iter().map(|w| w.count_ones()).sum()
}

fn write_now(path: &Path, data: &[u8]) -> Result<(), String> {
    let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(data).map_err(|e| e.to_string())
}

/// Inputs that reached a new outcome, kept for the next run (written at the end, so that a
/// replay of a run that died starts from the same corpus).
fn save_found(dir: &Path, inputs: &[Vec<u8>]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for input in inputs {
        std::fs::write(dir.join(format!("{:016x}", fnv1a(input))), input).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn escape(data: &[u8]) -> String {
    let shown: String = data.iter().take(600).flat_map(|b| std::ascii::escape_default(*b)).map(char::from).collect();
    if data.len() > 600 {
        format!("\"{shown}\"... ({} more bytes)", data.len() - 600)
    } else {
        format!("\"{shown}\"")
    }
}

// ---- reproduce --------------------------------------------------------------------------------

/// Runs saved inputs once each, with the panic's report: what to do with a finding.
fn reproduce(args: &[String]) -> Result<bool, String> {
    let (name, files) = args.split_first().ok_or("reproduce TARGET FILE...")?;
    let t = target(name).ok_or(format!("no target `{name}`"))?;
    let mut ok = true;
    for f in files {
        let data = std::fs::read(f).map_err(|e| format!("{f}: {e}"))?;
        let r = std::thread::Builder::new()
            .stack_size(WORKER_STACK)
            .spawn(move || panic::catch_unwind(move || (t.run)(&data)))
            .map_err(|e| e.to_string())?
            .join();
        match r {
            Ok(Ok(_)) => println!("{f}: ok"),
            _ => {
                ok = false;
                println!("{f}: PANIC (report above)");
            }
        }
    }
    Ok(ok)
}
