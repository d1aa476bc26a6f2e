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
    let format = format_for(o.log_format, std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = FORMAT.set(format);
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
    match format {
        // One object per line: timestamp, level, target and the event's fields at the top level.
        LogFormat::Json => start!(builder.json().flatten_event(true).with_current_span(false).with_span_list(false)),
        // Colour codes only for a person at a terminal, not in files, journald or a collector.
        LogFormat::Text => start!(builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))),
    }
}

/// The log's format: the configured one, or by default text for a person at a terminal and
/// JSON for everything else (a file, a pipe, journald, a container's log, a collector).
pub fn format_for(configured: Option<LogFormat>, stderr_is_terminal: bool) -> LogFormat {
    configured.unwrap_or(if stderr_is_terminal { LogFormat::Text } else { LogFormat::Json })
}

/// Makes `level` (an `observability.log_level` the configuration has validated) the log's
/// filter: a reload. Without effect when `RUST_LOG` chose the filter (it wins, as at start).
pub(crate) fn set_level(level: &str) -> Result<(), String> {
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

/// The format chosen at [`init`], for the lines written without `tracing`'s formatter.
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// One request's access line: written by [`access`].
pub struct AccessLine<'a> {
    pub request_id: &'a str,
    pub method: &'a str,
    /// The path only: a query string may carry a secret, a path never does (ids only).
    pub path: &'a str,
    pub route: &'static str,
    pub status: u16,
    pub elapsed: Duration,
    pub client_ip: std::net::IpAddr,
    /// The caller's key id (never the key).
    pub principal: Option<&'a str>,
    /// The verified subject of the client's certificate (mTLS).
    pub client_certificate: Option<&'a str>,
    /// The gateway rule that denied the request's tool call.
    pub rule: Option<&'a str>,
    /// A `tools/call` refused because the tool awaits approval (the gateway's `tool_policy`).
    pub tool_pending: bool,
}

/// Writes the access line of a request (target `toolgate::access`, level info), in the log's
/// format and under its filter like any other line (`toolgate::access=off` turns it off).
///
/// Formatted here rather than by `tracing`'s formatter: that one builds the line through a
/// visitor per field, a JSON serializer and a time formatter with a lock per line, about 10 % of
/// the process's CPU per call at saturation; this one appends the fields to a buffer of the
/// thread's own, for a line that has the same fields and shape.
pub fn access(line: &AccessLine<'_>) {
    if !tracing::enabled!(target: "toolgate::access", tracing::Level::INFO) {
        return;
    }
    let (Some(lines), Some(format)) = (LINES.get(), FORMAT.get()) else { return };
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(512));
    }
    BUFFER.with_borrow_mut(|out| {
        out.clear();
        match format {
            LogFormat::Json => access_json(out, line),
            LogFormat::Text => access_text(out, line),
        }
        let _ = LineWriter { lines, urgent: false }.write(out);
    });
}

fn access_json(out: &mut Vec<u8>, l: &AccessLine<'_>) {
    out.extend_from_slice(b"{\"timestamp\":\"");
    timestamp(out);
    out.extend_from_slice(b"\",\"level\":\"INFO\",\"message\":\"request\",\"request_id\":");
    json_string(out, l.request_id);
    out.extend_from_slice(b",\"method\":");
    json_string(out, l.method);
    out.extend_from_slice(b",\"path\":");
    json_string(out, l.path);
    out.extend_from_slice(b",\"route\":");
    json_string(out, l.route);
    out.extend_from_slice(b",\"status\":");
    out.extend_from_slice(itoa::Buffer::new().format(l.status).as_bytes());
    out.extend_from_slice(b",\"duration_ms\":");
    milliseconds(out, l.elapsed);
    out.extend_from_slice(b",\"client_ip\":\"");
    ip_text(out, l.client_ip);
    out.push(b'"');
    if let Some(p) = l.principal {
        out.extend_from_slice(b",\"principal\":");
        json_string(out, p);
    }
    if let Some(c) = l.client_certificate {
        out.extend_from_slice(b",\"client_certificate\":");
        json_string(out, c);
    }
    if let Some(r) = l.rule {
        out.extend_from_slice(b",\"rule\":");
        json_string(out, r);
    }
    if l.tool_pending {
        out.extend_from_slice(b",\"tool_pending\":true");
    }
    out.extend_from_slice(b",\"target\":\"toolgate::access\"}\n");
}

/// The shape of `tracing`'s text lines: time, level, target, message, then `name=value`.
fn access_text(out: &mut Vec<u8>, l: &AccessLine<'_>) {
    timestamp(out);
    out.extend_from_slice(b"  INFO toolgate::access: request request_id=");
    out.extend_from_slice(l.request_id.as_bytes());
    out.extend_from_slice(b" method=");
    out.extend_from_slice(l.method.as_bytes());
    out.extend_from_slice(b" path=");
    json_string(out, l.path);
    out.extend_from_slice(b" route=");
    out.extend_from_slice(l.route.as_bytes());
    out.extend_from_slice(b" status=");
    out.extend_from_slice(itoa::Buffer::new().format(l.status).as_bytes());
    out.extend_from_slice(b" duration_ms=");
    milliseconds(out, l.elapsed);
    out.extend_from_slice(b" client_ip=");
    ip_text(out, l.client_ip);
    if let Some(p) = l.principal {
        out.extend_from_slice(b" principal=");
        json_string(out, p);
    }
    if let Some(c) = l.client_certificate {
        out.extend_from_slice(b" client_certificate=");
        json_string(out, c);
    }
    if let Some(r) = l.rule {
        out.extend_from_slice(b" rule=");
        json_string(out, r);
    }
    if l.tool_pending {
        out.extend_from_slice(b" tool_pending=true");
    }
    out.push(b'\n');
}

/// Now in UTC as RFC 3339 with microseconds, as `tracing`'s lines have it.
///
/// Every line of a second starts with the same date and time: each thread keeps the text of the
/// second it last wrote and makes it again only when the second changes, so a line costs a
/// clock read and six digits rather than a calendar conversion.
fn timestamp(out: &mut Vec<u8>) {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    thread_local! {
        /// (Unix second, `YYYY-MM-DDTHH:MM:SS.` of that second).
        static SECOND: std::cell::Cell<(u64, [u8; 20])> = const { std::cell::Cell::new((u64::MAX, [0; 20])) };
    }
    let secs = since_epoch.as_secs();
    let (cached, mut text) = SECOND.get();
    if cached != secs {
        text = second_text(secs);
        SECOND.set((secs, text));
    }
    out.extend_from_slice(&text);
    zero_padded(out, u64::from(since_epoch.subsec_micros()), 6);
    out.push(b'Z');
}

/// `YYYY-MM-DDTHH:MM:SS.` of a Unix second. Made once a second, so chrono's formatter is
/// cheap enough here.
fn second_text(secs: u64) -> [u8; 20] {
    let at = i64::try_from(secs).ok().and_then(|s| chrono::DateTime::from_timestamp(s, 0)).unwrap_or_default();
    let mut text = [b'0'; 20];
    let _ = write!(&mut text[..], "{}", at.format("%Y-%m-%dT%H:%M:%S."));
    text
}

/// An address as its usual text; IPv4 (the common case) without the formatting machinery.
fn ip_text(out: &mut Vec<u8>, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(itoa::Buffer::new().format(octet).as_bytes());
            }
        }
        std::net::IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// A duration in milliseconds with three decimals (microseconds), without a float.
fn milliseconds(out: &mut Vec<u8>, d: Duration) {
    let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    out.extend_from_slice(itoa::Buffer::new().format(micros / 1000).as_bytes());
    out.push(b'.');
    zero_padded(out, micros % 1000, 3);
}

fn zero_padded(out: &mut Vec<u8>, n: u64, width: usize) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n);
    out.extend(std::iter::repeat_n(b'0', width.saturating_sub(digits.len())));
    out.extend_from_slice(digits.as_bytes());
}

/// `s` as a JSON string: quoted, with quotes, backslashes and control characters escaped.
fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let mut plain_from = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(&s.as_bytes()[plain_from..i]);
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            _ => {
                let _ = write!(out, "\\u{b:04x}");
            }
        }
        plain_from = i + 1;
    }
    out.extend_from_slice(&s.as_bytes()[plain_from..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_at_a_terminal_json_elsewhere_and_a_configured_format_wins() {
        assert_eq!(format_for(None, true), LogFormat::Text);
        assert_eq!(format_for(None, false), LogFormat::Json);
        assert_eq!(format_for(Some(LogFormat::Json), true), LogFormat::Json);
        assert_eq!(format_for(Some(LogFormat::Text), false), LogFormat::Text);
    }

    fn line(format: fn(&mut Vec<u8>, &AccessLine<'_>), l: &AccessLine<'_>) -> String {
        let mut out = Vec::new();
        format(&mut out, l);
        String::from_utf8(out).unwrap()
    }

    fn sample<'a>(path: &'a str, principal: Option<&'a str>) -> AccessLine<'a> {
        AccessLine {
            request_id: "5f0c0e5e-0000-4000-8000-000000000001",
            method: "POST",
            path,
            route: "gateway_mcp",
            status: 200,
            elapsed: Duration::from_micros(12_345),
            client_ip: "2001:db8::1".parse().unwrap(),
            principal,
            client_certificate: None,
            rule: None,
            tool_pending: false,
        }
    }

    #[test]
    fn the_json_line_is_one_object_with_every_field() {
        let text = line(access_json, &sample("/gateway/gw_1/mcp", Some("key_1")));
        assert!(text.ends_with("}\n") && text.matches('\n').count() == 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["target"], "toolgate::access");
        assert_eq!((&v["level"], &v["message"]), (&"INFO".into(), &"request".into()));
        assert_eq!(
            (&v["path"], &v["status"], &v["duration_ms"]),
            (&"/gateway/gw_1/mcp".into(), &200.into(), &12.345.into())
        );
        assert_eq!((&v["client_ip"], &v["principal"]), (&"2001:db8::1".into(), &"key_1".into()));
        assert!(v.get("client_certificate").is_none(), "absent, as tracing leaves a None out: {v}");
        assert!(v.get("rule").is_none(), "{v}");
        let denied = AccessLine { rule: Some("no-deletes"), ..sample("/gateway/gw_1/mcp", Some("key_1")) };
        let v: serde_json::Value = serde_json::from_str(&line(access_json, &denied)).unwrap();
        assert_eq!(v["rule"], "no-deletes");
        assert!(line(access_text, &denied).contains(" rule=\"no-deletes\""));
        let ts = chrono::DateTime::parse_from_rfc3339(v["timestamp"].as_str().unwrap()).unwrap();
        assert!((chrono::Utc::now() - ts.to_utc()).num_seconds().abs() < 5, "{ts}");
        assert_eq!(v["timestamp"].as_str().unwrap().len(), "2026-11-26T11:14:41.123456Z".len());
    }

    #[test]
    fn strings_are_escaped_so_a_line_stays_one_line() {
        let nasty = "/a\"b\\c\nd\u{1}é";
        let text = line(access_json, &sample(nasty, Some("k\"")));
        let v: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!((v["path"].as_str(), v["principal"].as_str()), (Some(nasty), Some("k\"")));
        let text = line(access_text, &sample(nasty, None));
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        assert!(
            text.contains(" INFO toolgate::access: request request_id=5f0c0e5e-")
                && text.contains(" status=200 duration_ms=12.345 "),
            "{text}"
        );
    }

    #[test]
    fn the_timestamp_of_each_second_is_its_own() {
        // The second's text, right at the edges of days, months, a leap day and years; then two
        // stamps in a row, the second no earlier than the first.
        for (secs, text) in [
            (0, "1970-01-01T00:00:00."),
            (951_782_399, "2000-02-28T23:59:59."),
            (951_782_400, "2000-02-29T00:00:00."),
            (1_798_761_599, "2026-12-31T23:59:59."),
            (1_798_761_600, "2027-01-01T00:00:00."),
        ] {
            assert_eq!(std::str::from_utf8(&second_text(secs)).unwrap(), text);
        }
        let stamp = || {
            let mut out = Vec::new();
            timestamp(&mut out);
            String::from_utf8(out).unwrap()
        };
        let (first, second) = (stamp(), stamp());
        for t in [&first, &second] {
            let parsed = chrono::DateTime::parse_from_rfc3339(t).unwrap().to_utc();
            assert!((chrono::Utc::now() - parsed).num_seconds().abs() < 2, "{t}");
        }
        assert!(first <= second, "{first} then {second}");
    }

    #[test]
    fn addresses_are_written_as_their_usual_text() {
        for ip in ["0.0.0.0", "127.0.0.1", "10.200.3.255", "2001:db8::1", "::ffff:10.0.0.1"] {
            let mut out = Vec::new();
            ip_text(&mut out, ip.parse().unwrap());
            assert_eq!(String::from_utf8(out).unwrap(), ip);
        }
    }

    #[test]
    fn milliseconds_keep_three_decimals() {
        let ms = |us| {
            let mut out = Vec::new();
            milliseconds(&mut out, Duration::from_micros(us));
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            (ms(0), ms(7), ms(1_000), ms(61_234_567)),
            ("0.000".into(), "0.007".into(), "1.000".into(), "61234.567".into())
        );
    }
}
