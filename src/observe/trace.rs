//! Distributed tracing: W3C trace context in and out, and spans exported over OTLP/HTTP.
//!
//! A client's `traceparent` (HTTP header, or `params._meta.traceparent` as MCP's trace-context
//! convention puts it) is carried to the app that serves the call, in both places. With
//! `observability.otlp_endpoint` set, toolgate takes part in the trace: each request is a server
//! span (a new trace when the client sent none), the filter chain an internal span, and each
//! call to an app a client span whose id is the parent the app sees; spans are batched and
//! posted as OTLP/HTTP JSON by a background service. Without it nothing is recorded and the
//! client's `traceparent` goes to the app unchanged: no span, no allocation on a request
//! without one.

use serde_json::{json, Value};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// The W3C trace context of one request, as toolgate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceContext {
    pub trace_id: [u8; 16],
    /// This request's span: toolgate's own (exporting), or the client's (not exporting).
    pub span_id: [u8; 8],
    /// The client's span, the parent of this request's (exporting only).
    pub parent_id: Option<[u8; 8]>,
    pub flags: u8,
    /// The client's `tracestate`, relayed as it came.
    pub state: Option<String>,
}

/// Parses a `traceparent` value (version `00`; a later version is read by its first four
/// fields, as the W3C recommendation asks). `None` for anything malformed or all-zero ids.
pub(crate) fn parse_traceparent(value: &str) -> Option<([u8; 16], [u8; 8], u8)> {
    let v = value.trim().as_bytes();
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let version = hex_byte(&v[0..2])?;
    if version == 0xff || (version == 0 && v.len() != 55) || (v.len() > 55 && v[55] != b'-') {
        return None;
    }
    let mut trace_id = [0u8; 16];
    for (i, b) in trace_id.iter_mut().enumerate() {
        *b = hex_byte(&v[3 + 2 * i..5 + 2 * i])?;
    }
    let mut span_id = [0u8; 8];
    for (i, b) in span_id.iter_mut().enumerate() {
        *b = hex_byte(&v[36 + 2 * i..38 + 2 * i])?;
    }
    let flags = hex_byte(&v[53..55])?;
    (trace_id != [0; 16] && span_id != [0; 8]).then_some((trace_id, span_id, flags))
}

/// Two lowercase hex digits (the W3C format allows no uppercase).
fn hex_byte(two: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(two[0])? << 4 | digit(two[1])?)
}

impl TraceContext {
    /// The context of a request that arrived with `traceparent` (and `tracestate`): `None` when
    /// there is nothing to carry or record.
    pub(crate) fn start(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<TraceContext> {
        let incoming = traceparent.and_then(parse_traceparent);
        let state = tracestate.filter(|s| !s.is_empty() && s.len() <= 512).map(str::to_string);
        match (incoming, exporting()) {
            (Some((trace_id, parent, flags)), true) => {
                Some(TraceContext { trace_id, span_id: new_span_id(), parent_id: Some(parent), flags, state })
            }
            (None, true) => Some(TraceContext {
                trace_id: new_trace_id(),
                span_id: new_span_id(),
                parent_id: None,
                flags: 1,
                state: None,
            }),
            (Some((trace_id, span_id, flags)), false) => {
                Some(TraceContext { trace_id, span_id, parent_id: None, flags, state })
            }
            (None, false) => None,
        }
    }

    /// The `traceparent` an app gets for a call whose span is `span_id`.
    pub(crate) fn traceparent(&self, span_id: &[u8; 8]) -> String {
        format!("00-{}-{}-{:02x}", hex::encode(self.trace_id), hex::encode(span_id), self.flags)
    }

    /// The span of a call to an app: a new one when exporting (its parent is this request's),
    /// else the client's own, relayed unchanged.
    pub(crate) fn call_span_id(&self) -> [u8; 8] {
        if exporting() {
            new_span_id()
        } else {
            self.span_id
        }
    }
}

fn new_trace_id() -> [u8; 16] {
    loop {
        let id: [u8; 16] = rand::random();
        if id != [0; 16] {
            return id;
        }
    }
}

pub(crate) fn new_span_id() -> [u8; 8] {
    loop {
        let id: [u8; 8] = rand::random();
        if id != [0; 8] {
            return id;
        }
    }
}

/// OTLP's span kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpanKind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// A finished span, on its way to the exporter.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent_id: Option<[u8; 8]>,
    pub name: String,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub duration: Duration,
    pub error: bool,
    pub attributes: Vec<(&'static str, Value)>,
}

impl Span {
    /// OTLP's JSON form of a span (ids in hex, times in Unix nanoseconds as strings).
    fn to_otlp(&self) -> Value {
        let start = self.start.duration_since(UNIX_EPOCH).unwrap_or_default();
        let end = start + self.duration;
        let mut span = json!({
            "traceId": hex::encode(self.trace_id),
            "spanId": hex::encode(self.span_id),
            "name": self.name,
            "kind": self.kind as i32,
            "startTimeUnixNano": start.as_nanos().to_string(),
            "endTimeUnixNano": end.as_nanos().to_string(),
            "attributes": self.attributes.iter().map(|(k, v)| json!({ "key": k, "value": any_value(v) })).collect::<Vec<_>>(),
            "status": { "code": if self.error { 2 } else { 0 } },
        });
        if let Some(parent) = self.parent_id {
            span["parentSpanId"] = Value::String(hex::encode(parent));
        }
        span
    }
}

/// OTLP's `AnyValue` of a JSON scalar.
fn any_value(v: &Value) -> Value {
    match v {
        Value::Bool(b) => json!({ "boolValue": b }),
        Value::Number(n) if n.is_i64() || n.is_u64() => json!({ "intValue": n.to_string() }),
        Value::Number(n) => json!({ "doubleValue": n.as_f64() }),
        Value::String(s) => json!({ "stringValue": s }),
        other => json!({ "stringValue": other.to_string() }),
    }
}

/// Spans waiting for the exporter; beyond this many, new ones are dropped (and counted).
const QUEUE: usize = 8192;
/// Spans per export request.
const BATCH: usize = 512;
/// How long a span waits for its batch to fill.
const BATCH_DELAY: Duration = Duration::from_millis(500);

static SPANS: OnceLock<mpsc::Sender<Span>> = OnceLock::new();

/// Whether spans are recorded (an OTLP endpoint is configured).
pub(crate) fn exporting() -> bool {
    SPANS.get().is_some()
}

/// Hands a finished span to the exporter; a full queue drops it, counted in
/// `toolgate_trace_spans_dropped_total`.
pub(crate) fn record(span: Span) {
    if let Some(tx) = SPANS.get() {
        if tx.try_send(span).is_err() {
            crate::observe::metrics::trace_spans_dropped(1);
        }
    }
}

/// Turns export on: the returned service posts the spans to `endpoint`. Called once, at start.
pub(crate) fn start_export(endpoint: String, service_name: String) -> Option<Exporter> {
    let (tx, rx) = mpsc::channel(QUEUE);
    SPANS.set(tx).ok()?;
    Some(Exporter { endpoint, service_name, rx: parking_lot::Mutex::new(Some(rx)) })
}

/// The Pingora background service that batches spans and posts them (OTLP/HTTP, JSON).
pub(crate) struct Exporter {
    endpoint: String,
    service_name: String,
    rx: parking_lot::Mutex<Option<mpsc::Receiver<Span>>>,
}

impl Exporter {
    fn body(&self, spans: &[Span]) -> Vec<u8> {
        let body = json!({ "resourceSpans": [{
            "resource": { "attributes": [
                { "key": "service.name", "value": { "stringValue": self.service_name } },
                { "key": "service.version", "value": { "stringValue": env!("CARGO_PKG_VERSION") } },
            ]},
            "scopeSpans": [{
                "scope": { "name": "toolgate", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans.iter().map(Span::to_otlp).collect::<Vec<_>>(),
            }],
        }]});
        serde_json::to_vec(&body).unwrap_or_default()
    }

    async fn post(&self, client: &reqwest::Client, spans: &[Span]) {
        let sent =
            client.post(&self.endpoint).header("content-type", "application/json").body(self.body(spans)).send().await;
        match sent {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => {
                crate::observe::metrics::trace_spans_dropped(spans.len());
                tracing::warn!(status = r.status().as_u16(), spans = spans.len(), "the OTLP endpoint refused spans");
            }
            Err(e) => {
                crate::observe::metrics::trace_spans_dropped(spans.len());
                tracing::warn!(error = %e, spans = spans.len(), "cannot export spans");
            }
        }
    }
}

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for Exporter {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let Some(mut rx) = self.rx.lock().take() else { return };
        // The collector is the operator's: redirects are followed, as many as reqwest's default.
        let client = crate::outbound::client::builder()
            .follow_redirects(10)
            .timeout(Duration::from_secs(10))
            .build()
            .expect("an HTTP client with default TLS settings");
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let deadline = tokio::time::sleep(BATCH_DELAY);
            tokio::pin!(deadline);
            let stopping = loop {
                tokio::select! {
                    span = rx.recv() => match span {
                        Some(s) => {
                            batch.push(s);
                            if batch.len() >= BATCH {
                                break false;
                            }
                        }
                        None => break true,
                    },
                    _ = &mut deadline => break false,
                    _ = shutdown.changed() => break true,
                }
            };
            if stopping {
                // The spans of the requests that finished during the grace period go too.
                while let Ok(s) = rx.try_recv() {
                    batch.push(s);
                }
            }
            for chunk in batch.chunks(BATCH) {
                self.post(&client, chunk).await;
            }
            batch.clear();
            if stopping {
                return;
            }
        }
    }
}

/// `params` with `_meta.traceparent` (and `tracestate`) set, as MCP's trace-context
/// convention carries them to a server; absent params become an object holding only `_meta`.
/// `None` for params that are not an object (MCP's never are): they go as they came.
pub(crate) fn with_meta(params: Option<&Value>, traceparent: &str, tracestate: Option<&str>) -> Option<Value> {
    let mut p = match params {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        None => json!({}),
        Some(_) => return None,
    };
    let meta = p.as_object_mut()?.entry("_meta").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta["traceparent"] = Value::String(traceparent.to_string());
    if let Some(s) = tracestate {
        meta["tracestate"] = Value::String(s.to_string());
    }
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_read_as_the_w3c_recommendation_says() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let (t, s, f) = parse_traceparent(ok).unwrap();
        assert_eq!(hex::encode(t), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!((hex::encode(s).as_str(), f), ("00f067aa0ba902b7", 1));
        // A later version: the first four fields, more after a dash.
        assert!(parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra").is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn meta_carries_the_context_and_keeps_what_was_there() {
        let p = json!({"name": "t", "_meta": {"progressToken": 1}});
        let with = with_meta(Some(&p), "00-aa-bb-01", Some("k=v")).unwrap();
        assert_eq!(with["_meta"], json!({"progressToken": 1, "traceparent": "00-aa-bb-01", "tracestate": "k=v"}));
        assert_eq!(with["name"], "t");
        assert_eq!(with_meta(None, "tp", None), Some(json!({"_meta": {"traceparent": "tp"}})));
        assert_eq!(with_meta(Some(&json!([1])), "tp", None), None, "not an object: left alone");
    }

    #[test]
    fn a_span_in_otlp_json_names_its_parent_and_times_in_nanoseconds() {
        let span = Span {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_id: Some([3; 8]),
            name: "tools/call echo".into(),
            kind: SpanKind::Client,
            start: UNIX_EPOCH + Duration::from_secs(1),
            duration: Duration::from_millis(2),
            error: true,
            attributes: vec![("mcp.method.name", json!("tools/call")), ("http.response.status_code", json!(200))],
        };
        let v = span.to_otlp();
        assert_eq!(v["traceId"], "01010101010101010101010101010101");
        assert_eq!(v["parentSpanId"], "0303030303030303");
        assert_eq!((&v["startTimeUnixNano"], &v["endTimeUnixNano"]), (&json!("1000000000"), &json!("1002000000")));
        assert_eq!((&v["kind"], &v["status"]["code"]), (&json!(3), &json!(2)));
        assert_eq!(v["attributes"][1], json!({"key": "http.response.status_code", "value": {"intValue": "200"}}));
    }
}
