//! The `text/event-stream` parser of an app's answers.

use super::*;

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` means the default type, `message`.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last `id:` seen on the stream (kept across events, as the SSE spec says). Shared,
    /// not copied: a long id followed by many tiny events would otherwise cost its length once
    /// per event (a 35 KB stream asked for more than 40 MiB before this was an `Arc`).
    pub id: Option<Arc<str>>,
}

/// Incremental `text/event-stream` parser (WHATWG HTML "server-sent events" rules): lines end in
/// LF, CR or CRLF (also split across chunks); `data:` lines accumulate; a blank line dispatches;
/// lines starting with `:` are comments; one space after the colon is dropped.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    event: Option<String>,
    last_id: Option<Arc<str>>,
    /// The previous chunk ended in CR: a LF at the start of the next one belongs to it.
    pending_cr: bool,
    /// The last `retry:` (reconnection time, ms).
    retry_ms: Option<u64>,
}

impl SseParser {
    /// Feeds bytes, appending complete events to `out`. Fails only on an over-long line or event.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), UpstreamError> {
        let mut rest = chunk;
        if self.pending_cr {
            self.pending_cr = false;
            if rest.first() == Some(&b'\n') {
                rest = &rest[1..];
            }
        }
        while let Some(pos) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..pos]);
            let line = std::mem::take(&mut self.line);
            let r = self.process_line(&line, out);
            self.line = line;
            self.line.clear();
            r?;
            if rest[pos] == b'\r' {
                match rest.get(pos + 1) {
                    Some(b'\n') => {
                        rest = &rest[pos + 2..];
                        continue;
                    }
                    None => self.pending_cr = true,
                    Some(_) => {}
                }
            }
            rest = &rest[pos + 1..];
        }
        if self.line.len() + rest.len() > MAX_MESSAGE_BYTES {
            return Err(UpstreamError::Protocol("SSE line too long".into()));
        }
        self.line.extend_from_slice(rest);
        Ok(())
    }

    /// End of stream: an event not terminated by a blank line is still delivered (lenient: some
    /// servers close right after the last `data:` line).
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            let _ = self.process_line(&line, out);
        }
        self.dispatch(out);
    }

    /// The last event id seen (for `Last-Event-ID` on resumption).
    pub(crate) fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The reconnection time the server asked for (`retry:`).
    pub fn retry(&self) -> Option<Duration> {
        self.retry_ms.map(Duration::from_millis)
    }

    /// A new stream continues an old one: its event id carries over (until the new one sends its
    /// own), the rest starts afresh.
    pub(crate) fn reset_keeping_id(&mut self) {
        let last_id = self.last_id.take();
        let retry_ms = self.retry_ms;
        *self = SseParser { last_id, retry_ms, ..SseParser::default() };
    }

    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), UpstreamError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
                if self.data.len() > MAX_MESSAGE_BYTES {
                    return Err(UpstreamError::Protocol("SSE event too large".into()));
                }
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" if !value.contains(&0) => self.last_id = Some(String::from_utf8_lossy(value).into()),
            b"retry" => {
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u64>().ok()) {
                    self.retry_ms = Some(ms);
                }
            }
            _ => {} // unknown fields
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        let data = String::from_utf8_lossy(&std::mem::take(&mut self.data)).into_owned();
        out.push(SseEvent { event, data, id: self.last_id.clone() });
    }
}
