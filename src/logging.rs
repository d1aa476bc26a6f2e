//! The process's own log (not the request log): format, level, and a writer thread.

use crate::config::{LogFormat, ObservabilityConfig};

/// Bytes of log lines the writer thread gathers before a write.
const LOG_WRITE_BUFFER: usize = 64 * 1024;

/// The writer thread of the process's log, kept until [`flush`].
static LOG_WRITER: parking_lot::Mutex<Option<tracing_appender::non_blocking::WorkerGuard>> =
    parking_lot::Mutex::new(None);

/// The process's log on standard error: `observability.log_format` and `log_level`, or
/// `RUST_LOG` when it is set and not empty (it wins, as operators expect of a Rust program).
/// Lines are formatted by the thread that logs and written by a thread of their own, so that a
/// request's access line costs it no system call; a full queue (128k lines) makes the logging
/// thread wait rather than lose lines. The writer thread buffers what it takes off the queue and
/// writes it with one `write(2)` whenever the queue runs empty (standard error is unbuffered: a
/// system call per line was 5 % of the process's CPU at saturation), so lines still leave as soon
/// as nothing else is waiting.
pub fn init(o: &ObservabilityConfig) {
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let filter = from_env
        .and_then(|v| match tracing_subscriber::EnvFilter::try_new(&v) {
            Ok(f) => Some(f),
            Err(e) => {
                // Before the log exists: said on standard error, as a configuration error is.
                eprintln!("toolgate: RUST_LOG {v:?} is not a log filter ({e}); using observability.log_level");
                None
            }
        })
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(&o.log_level));
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .finish(std::io::BufWriter::with_capacity(LOG_WRITE_BUFFER, std::io::stderr()));
    *LOG_WRITER.lock() = Some(guard);
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer);
    match o.log_format {
        // One object per line: timestamp, level, target and the event's fields at the top level.
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).with_span_list(false).init(),
        // Colour codes only for a person at a terminal, not in files, journald or a collector.
        LogFormat::Text => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
    }
}

/// Writes the log lines still queued and stops the writer thread: the last thing before the
/// process exits (Pingora exits without running destructors). Later lines are not written.
pub fn flush() {
    drop(LOG_WRITER.lock().take());
}
