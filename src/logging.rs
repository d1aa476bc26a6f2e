//! The process's own log (not the request log): format, level, and a writer thread.

use crate::config::{LogFormat, ObservabilityConfig};
use parking_lot::{Condvar, Mutex};
use std::io::Write;
use std::sync::OnceLock;
use std::time::Duration;

/// How long a line may wait in memory before the writer thread writes it out.
const WRITE_INTERVAL: Duration = Duration::from_millis(25);

/// Bytes waiting at which the writer thread is woken before its interval is up.
const WAKE_AT: usize = 256 * 1024;

/// Bytes waiting at which a logging thread stops to write them itself: lines are never dropped,
/// so a writer that cannot keep up slows the threads that log instead.
const WRITE_NOW_AT: usize = 8 * 1024 * 1024;

/// The lines waiting for the writer thread, once [`init`] has run.
static LINES: OnceLock<Lines> = OnceLock::new();

/// Puts a new filter in place (a reload of `observability.log_level`); unset when `RUST_LOG`
/// chose the filter at start, which then stays.
type SetFilter = Box<dyn Fn(tracing_subscriber::EnvFilter) -> Result<(), String> + Send + Sync>;
static SET_FILTER: OnceLock<SetFilter> = OnceLock::new();

/// The process's log on standard error: `observability.log_format` and `log_level`, or
/// `RUST_LOG` when it is set and not empty (it wins, as operators expect of a Rust program).
///
/// A line is formatted by the thread that logs and appended to a memory buffer (one short lock,
/// no system call, no thread woken); a writer thread of its own writes what has gathered every
/// [`WRITE_INTERVAL`] with one `write(2)`. At saturation a write and a wake-up per access line
/// (a queue to a writer thread, or standard error directly) cost about 5 % of the process's CPU.
/// A warning or an error wakes the writer at once: they are rare, and whoever watches the log
/// for them should not wait.
pub fn init(o: &ObservabilityConfig) {
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let env_filter = from_env.and_then(|v| match tracing_subscriber::EnvFilter::try_new(&v) {
        Ok(f) => Some(f),
        Err(e) => {
            // Before the log exists: said on standard error, as a configuration error is.
            eprintln!("toolgate: RUST_LOG {v:?} is not a log filter ({e}); using observability.log_level");
            None
        }
    });
    let reloadable = env_filter.is_none();
    let filter = env_filter.unwrap_or_else(|| tracing_subscriber::EnvFilter::new(&o.log_level));
    let lines: &'static Lines = LINES.get_or_init(Lines::default);
    lines.start_writer();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(LogWriter(lines));
    // The two formats are two types of subscriber, each with its own handle (made once the
    // format is chosen: the handle's type names it).
    macro_rules! start {
        ($builder:expr) => {{
            let builder = $builder.with_filter_reloading();
            if reloadable {
                let handle = builder.reload_handle();
                let _ = SET_FILTER.set(Box::new(move |f| handle.reload(f).map_err(|e| e.to_string())));
            }
            builder.init()
        }};
    }
    match o.log_format {
        // One object per line: timestamp, level, target and the event's fields at the top level.
        LogFormat::Json => start!(builder.json().flatten_event(true).with_current_span(false).with_span_list(false)),
        // Colour codes only for a person at a terminal, not in files, journald or a collector.
        LogFormat::Text => start!(builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))),
    }
}

/// Makes `level` (an `observability.log_level` the configuration has validated) the log's
/// filter: a reload. Without effect when `RUST_LOG` chose the filter (it wins, as at start).
pub fn set_level(level: &str) -> Result<(), String> {
    let Some(set) = SET_FILTER.get() else {
        tracing::info!("RUST_LOG is set: it stays the log filter, observability.log_level is not applied");
        return Ok(());
    };
    set(tracing_subscriber::EnvFilter::try_new(level).map_err(|e| e.to_string())?)
}

/// Writes the lines still waiting: the last thing before the process exits (Pingora exits
/// without running destructors). Later lines are written by the writer thread while it runs.
pub fn flush() {
    if let Some(lines) = LINES.get() {
        lines.write_out();
    }
}

/// Formatted lines waiting to be written to standard error.
#[derive(Default)]
struct Lines {
    waiting: Mutex<Vec<u8>>,
    wake: Condvar,
    /// Held while writing, so that lines taken from `waiting` leave in the order they came.
    writing: Mutex<()>,
}

impl Lines {
    fn start_writer(&'static self) {
        let writer = self;
        let spawned = std::thread::Builder::new().name("toolgate-stderr".into()).spawn(move || loop {
            {
                let mut waiting = writer.waiting.lock();
                if waiting.len() < WAKE_AT {
                    writer.wake.wait_for(&mut waiting, WRITE_INTERVAL);
                }
            }
            writer.write_out();
        });
        if let Err(e) = spawned {
            // Lines then wait until the buffer is full or the process exits; said once.
            eprintln!("toolgate: no log writer thread ({e}); the log is written in large pieces");
        }
    }

    /// Writes every waiting line.
    fn write_out(&self) {
        let _order = self.writing.lock();
        let taken = std::mem::take(&mut *self.waiting.lock());
        if taken.is_empty() {
            return;
        }
        // Nowhere to report a failed write to standard error.
        let _ = std::io::stderr().lock().write_all(&taken);
        // The emptied buffer is given back when nothing was logged meanwhile, keeping its capacity.
        let mut waiting = self.waiting.lock();
        if waiting.is_empty() {
            let mut reuse = taken;
            reuse.clear();
            *waiting = reuse;
        }
    }
}

/// The subscriber's writer: [`Lines`], told whether a line is a warning or an error.
struct LogWriter(&'static Lines);

/// One line's writer.
struct LineWriter {
    lines: &'static Lines,
    urgent: bool,
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter { lines: self.0, urgent: false }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> LineWriter {
        // Levels order by verbosity: WARN and ERROR are the ones at or below WARN.
        LineWriter { lines: self.0, urgent: *meta.level() <= tracing::Level::WARN }
    }
}

impl Write for LineWriter {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        let lines = self.lines;
        let waiting_now = {
            let mut waiting = lines.waiting.lock();
            waiting.extend_from_slice(line);
            waiting.len()
        };
        if waiting_now >= WRITE_NOW_AT {
            lines.write_out();
        } else if self.urgent || waiting_now >= WAKE_AT {
            lines.wake.notify_one();
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
