//! The parser of an app's `text/event-stream` answers (`SseParser` in `mcp/upstream/http/sse.rs`,
//! fed by the chunks that `mcp/upstream/wire.rs` reads off the socket), and what each event's
//! data goes through next: `jsonrpc::parse`, a batch flattened as the upstream reader does.
//!
//! The first two bytes of the input choose where the stream is cut into chunks; the rest is the
//! stream. Property beyond "no panic": the events do not depend on how the stream was cut (one
//! chunk, the chosen cuts, or one byte at a time), since TCP may deliver any of them.

use super::{Features, Outcome};
use toolgate::mcp::jsonrpc::{self, Incoming};
use toolgate::mcp::upstream::http::{SseEvent, SseParser};

pub fn run(data: &[u8]) -> Features {
    let mut out = Outcome::new();
    let (cuts, stream) = match data {
        [a, b, rest @ ..] => (u16::from_le_bytes([*a, *b]), rest),
        _ => (0, data),
    };

    let whole = parse(&[stream]);
    out.add(if whole.1.is_ok() { "ok" } else { "too-large" });
    // Chunks whose lengths come from the cut bits: 1..=16 bytes each, repeating.
    let mut chunks = Vec::new();
    let mut rest = stream;
    let mut i = 0u32;
    while !rest.is_empty() {
        let len = (usize::from((cuts >> (i % 4 * 4)) & 0xf) + 1).min(rest.len());
        let (c, r) = rest.split_at(len);
        chunks.push(c);
        rest = r;
        i += 1;
    }
    let cut = parse(&chunks);
    assert_eq!(cut, whole, "events depend on where the stream was cut ({} chunks)", chunks.len());
    if stream.len() <= 4096 {
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse(&bytes), whole, "events differ when fed one byte at a time");
    }

    let (events, _) = whole;
    out.add_count(events.len());
    for ev in &events {
        out.add(match ev.event.as_deref() {
            None => "message",
            Some("message") => "named-message",
            Some(_) => "other-type",
        });
        out.add(if ev.id.is_some() { "id" } else { "no-id" });
        // As the upstream readers do: skip other event types and empty data, parse the rest.
        if ev.event.as_deref().is_some_and(|t| t != "message") || ev.data.trim().is_empty() {
            continue;
        }
        match jsonrpc::parse(ev.data.as_bytes()) {
            Ok(Incoming::Single(m)) => out.add(m.method().map_or("response", |_| "call")),
            Ok(Incoming::Batch(items)) => {
                out.add("batch");
                out.add_count(items.iter().filter(|i| i.is_ok()).count());
            }
            Err(e) => out.add_count(e.code().unsigned_abs() as usize),
        }
    }
    out.finish()
}

/// Feeds the chunks, then ends the stream; the events and whether a limit stopped it.
fn parse(chunks: &[&[u8]]) -> (Vec<SseEvent>, Result<(), String>) {
    let mut p = SseParser::default();
    let mut events = Vec::new();
    for c in chunks {
        if let Err(e) = p.feed(c, &mut events) {
            return (events, Err(e.to_string()));
        }
    }
    p.finish(&mut events);
    (events, Ok(()))
}
