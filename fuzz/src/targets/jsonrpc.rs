//! The MCP endpoint's JSON-RPC reader: what `POST /gateway/{id}/mcp` does with a body
//! (`jsonrpc::parse`), what a stdio line or SSE event from an app goes through
//! (`parse_message`), and the answers written back for each outcome.
//!
//! Properties beyond "no panic": a message that parsed is written back by `Message::to_bytes`
//! and reads back as the same message (ids byte-exact, params relayed unchanged), and every
//! error has a response that is itself a valid JSON-RPC response.

use super::{Features, Outcome};
use toolgate::mcp::jsonrpc::{self, Incoming, Message, ParseError};

pub fn run(data: &[u8]) -> Features {
    let mut out = Outcome::new();
    match jsonrpc::parse(data) {
        Ok(Incoming::Single(m)) => {
            out.add("single");
            message(&m, &mut out);
            assert!(jsonrpc::parse_message(data).is_ok(), "parse_message refused what parse accepted as one message");
        }
        Ok(Incoming::Batch(items)) => {
            out.add("batch");
            assert!(!items.is_empty(), "an empty batch must be an error");
            out.add_count(items.len());
            for item in &items {
                match item {
                    Ok(m) => message(m, &mut out),
                    Err(invalid) => {
                        out.add_text(&invalid.reason);
                        answer_parses(&invalid.to_response().to_bytes());
                    }
                }
            }
            // The answers to the invalid items, as one batch, read back as responses.
            let invalid: Vec<Vec<u8>> =
                items.iter().filter_map(|i| i.as_ref().err()).map(|e| e.to_response().to_bytes()).collect();
            if !invalid.is_empty() {
                let n = invalid.len();
                let answers = jsonrpc::batch_bytes(invalid);
                match jsonrpc::parse(&answers) {
                    Ok(Incoming::Batch(back)) => assert!(
                        back.len() == n && back.iter().all(|m| matches!(m, Ok(Message::Response(_)))),
                        "batch answer does not read back as {n} responses: {}",
                        show(&answers)
                    ),
                    other => panic!("batch answer is not a batch: {} -> {other:?}", show(&answers)),
                }
            }
            assert!(jsonrpc::parse_message(data).is_err(), "parse_message accepted a batch");
        }
        Err(e) => {
            assert!(
                !matches!(e, ParseError::Ambiguous { .. }),
                "only parse_from_client refuses a message as ambiguous"
            );
            refused(&e, &mut out);
        }
    }
    out.finish()
}

/// One parsed message: written back, it must read as the same message.
fn message(m: &Message, out: &mut Outcome) {
    out.add(match m {
        Message::Request(_) => "request",
        Message::Notification(_) => "notification",
        Message::Response(r) if r.outcome.is_ok() => "result",
        Message::Response(_) => "error",
    });
    if let Some(method) = m.method() {
        let known = ["initialize", "ping", "tools/call", "tools/list", "notifications/cancelled", "server/discover"];
        out.add(if known.contains(&method) { method } else { "other-method" });
    }
    let bytes = m.to_bytes();
    match jsonrpc::parse(&bytes) {
        Ok(Incoming::Single(again)) => assert_eq!(&again, m, "message changed through to_bytes: {}", show(&bytes)),
        other => panic!("to_bytes wrote what does not parse back as one message: {} -> {other:?}", show(&bytes)),
    }
}

/// A refusal's features; its answer must be a JSON-RPC response a client can read.
pub(super) fn refused(e: &ParseError, out: &mut Outcome) {
    match e {
        ParseError::Parse(_) => out.add("parse-error"),
        ParseError::Invalid(i) => {
            out.add("invalid");
            out.add_text(&i.reason);
        }
        ParseError::Ambiguous { what, .. } => {
            out.add("ambiguous");
            out.add_text(&what.to_string());
        }
    }
    out.add_count(e.code().unsigned_abs() as usize);
    answer_parses(&e.to_response().to_bytes());
}

/// An answer the gateway writes must be a JSON-RPC response a client can read.
fn answer_parses(bytes: &[u8]) {
    match jsonrpc::parse(bytes) {
        Ok(Incoming::Single(Message::Response(_))) => {}
        other => panic!("error answer is not a JSON-RPC response: {} -> {other:?}", show(bytes)),
    }
}

pub(super) fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(400)]).into_owned()
}
