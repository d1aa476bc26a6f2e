//! Prometheus metrics, served on `server.metrics_listen` by Pingora's Prometheus service.
//!
//! MCP operations are named as the OpenTelemetry MCP semantic conventions name them, in
//! Prometheus form: `mcp_server_operation_duration_seconds` for what clients ask of toolgate,
//! `mcp_client_operation_duration_seconds` for what toolgate asks of apps, with the attributes
//! `mcp.method.name`, `gen_ai.tool.name` and `error.type` as `mcp_method_name`,
//! `gen_ai_tool_name` and `error_type`. The rest is toolgate's own, prefixed `toolgate_`.
//! Label values that clients choose (tool names, gateways) are capped ([`LabelCap`]), so a
//! client cannot grow the series without bound; methods outside MCP's list read `other`.

use parking_lot::RwLock;
use pingora_prometheus::prometheus::core::{Collector, Desc};
use pingora_prometheus::prometheus::proto::MetricFamily;
use pingora_prometheus::prometheus::{
    register_histogram, register_histogram_vec, register_int_counter, register_int_counter_vec, register_int_gauge,
    register_int_gauge_vec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};
use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::Duration;

/// Bucket bounds (seconds) of the MCP operation histograms: the semantic conventions' bounds
/// (10 ms to 300 s) with finer ones below, where a gateway's own answers are.
const OPERATION_BUCKETS: [f64; 20] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// The label values a client-chosen label may take: the first `cap` values seen keep their
/// name, later ones fold into `other`; a cap of 0 turns the label off (empty value).
pub(crate) struct LabelCap {
    cap: usize,
    seen: RwLock<HashSet<Box<str>>>,
}

impl LabelCap {
    pub(crate) fn new(cap: usize) -> LabelCap {
        LabelCap { cap, seen: RwLock::new(HashSet::new()) }
    }

    pub(crate) fn fold<'a>(&self, value: &'a str) -> &'a str {
        if self.cap == 0 {
            return "";
        }
        if self.seen.read().contains(value) {
            return value;
        }
        let mut seen = self.seen.write();
        if seen.contains(value) {
            value
        } else if seen.len() < self.cap {
            seen.insert(value.into());
            value
        } else {
            "other"
        }
    }
}

/// How many distinct gateways and tools get series of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LabelLimits {
    pub gateways: usize,
    pub tools: usize,
}

impl Default for LabelLimits {
    fn default() -> LabelLimits {
        LabelLimits { gateways: 100, tools: 200 }
    }
}

static LIMITS: OnceLock<LabelLimits> = OnceLock::new();

/// The MCP methods that keep their name as a label value.
const MCP_METHODS: [&str; 20] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/roots/list_changed",
];

fn method_label(method: &str) -> &str {
    if MCP_METHODS.contains(&method) {
        method
    } else {
        "other"
    }
}

struct Mcp {
    server_ops: HistogramVec,
    client_ops: HistogramVec,
    session_duration: Histogram,
    session_groups: Histogram,
    denied: IntCounterVec,
    gateways: LabelCap,
    tools: LabelCap,
    rules: LabelCap,
}

fn mcp() -> &'static Mcp {
    static M: OnceLock<Mcp> = OnceLock::new();
    M.get_or_init(|| {
        let limits = LIMITS.get().copied().unwrap_or_default();
        Mcp {
            server_ops: register_histogram_vec!(
                "mcp_server_operation_duration_seconds",
                "MCP requests clients made of toolgate's gateways, by method, tool, error type and gateway",
                &["mcp_method_name", "gen_ai_tool_name", "error_type", "gateway"],
                OPERATION_BUCKETS.to_vec()
            )
            .expect("metric registers once"),
            client_ops: register_histogram_vec!(
                "mcp_client_operation_duration_seconds",
                "MCP requests toolgate made of apps, by method, tool, error type and app",
                &["mcp_method_name", "gen_ai_tool_name", "error_type", "app"],
                OPERATION_BUCKETS.to_vec()
            )
            .expect("metric registers once"),
            session_duration: register_histogram!(
                "mcp_server_session_duration_seconds",
                "Lifetime of MCP sessions, observed when they end or expire",
                vec![1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0]
            )
            .expect("metric registers once"),
            session_groups: register_histogram!(
                "toolgate_mcp_session_group_size",
                "New MCP sessions written per store transaction (group commit)",
                vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0]
            )
            .expect("metric registers once"),
            denied: register_int_counter_vec!(
                "toolgate_tool_denied_total",
                "Tool calls a gateway's rule denied, by gateway and rule",
                &["gateway", "rule"]
            )
            .expect("metric registers once"),
            gateways: LabelCap::new(limits.gateways),
            tools: LabelCap::new(limits.tools),
            rules: LabelCap::new(limits.tools),
        }
    })
}

/// What went wrong with an MCP operation, as `error_type`: the JSON-RPC error code, or
/// `tool_error` for a tool result with `isError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorType {
    None,
    Code(i64),
    ToolError,
}

impl ErrorType {
    pub(crate) fn is_error(self) -> bool {
        self != ErrorType::None
    }

    /// The `error_type` label: empty on success.
    pub(crate) fn label<'a>(&self, buf: &'a mut itoa::Buffer) -> &'a str {
        match self {
            ErrorType::None => "",
            ErrorType::ToolError => "tool_error",
            ErrorType::Code(code) => buf.format(*code),
        }
    }
}

/// A request a client made of a gateway, answered (or refused) by toolgate.
pub(crate) fn mcp_server_operation(
    method: &str,
    tool: Option<&str>,
    error: ErrorType,
    gateway: &str,
    elapsed: Duration,
) {
    let m = mcp();
    observe_operation(&m.server_ops, method, tool, error, m.gateways.fold(gateway), elapsed);
}

/// A tool call a gateway's rule denied (rule names share the tools' cap).
pub(crate) fn tool_denied(gateway: &str, rule: &str) {
    let m = mcp();
    m.denied.with_label_values(&[m.gateways.fold(gateway), m.rules.fold(rule)]).inc();
}

/// A tool call refused by one of its gateway's `tool_limits` (labels capped like the others).
pub(crate) fn tool_limited(gateway: &str, tool: &str) {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    let m = mcp();
    C.get_or_init(|| {
        register_int_counter_vec!(
            "toolgate_tool_limited_total",
            "Tool calls refused by a gateway's per-tool limits, by gateway and tool",
            &["gateway", "tool"]
        )
        .expect("metric registers once")
    })
    .with_label_values(&[m.gateways.fold(gateway), m.tools.fold(tool)])
    .inc();
}

/// A caller's token exchanged for an app's (RFC 8693, `oauth.token_exchange`), by app and
/// `outcome`: `issued`, `refused` (the provider's error), `failed` (unreachable, or an answer
/// without a usable token), `unexchangeable` (a credential that is no token, or of a kind the
/// app does not take). Cached tokens are not counted: each count is one request to the provider
/// or one refusal. App ids are the configuration's, so the labels are bounded.
pub(crate) fn token_exchange(app: &str, outcome: &'static str) {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    C.get_or_init(|| {
        register_int_counter_vec!(
            "toolgate_token_exchanges_total",
            "Token exchanges (RFC 8693) of callers' tokens for apps' tokens, by app and outcome",
            &["app", "outcome"]
        )
        .expect("metric registers once")
    })
    .with_label_values(&[app, outcome])
    .inc();
}

/// An ended connection's tokens revoked at its app's authorization server (RFC 7009), by app
/// and `outcome`: `revoked`, `failed` (unreachable, or refused: logged without the token),
/// `unsupported` (the provider offers no revocation). One count per connection ended.
pub(crate) fn token_revocation(app: &str, outcome: &'static str) {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    C.get_or_init(|| {
        register_int_counter_vec!(
            "toolgate_token_revocations_total",
            "Ended connections whose tokens were revoked at the app's provider (RFC 7009), by app and outcome",
            &["app", "outcome"]
        )
        .expect("metric registers once")
    })
    .with_label_values(&[app, outcome])
    .inc();
}

/// A tool call the gateway's rules refused other than by a rule's match: `input_too_large`
/// (larger than a rule's cost bound allows), `failed` (a rule could not be evaluated),
/// `unreadable_arguments` (arguments the rules cannot read), `busy` (the organisation's slots
/// for dear rule sets are taken). No gateway label: `toolgate_tool_denied_total` has it.
pub(crate) fn rule_refused(reason: &'static str) {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    C.get_or_init(|| {
        register_int_counter_vec!(
            "toolgate_rule_refusals_total",
            "Tool calls refused by a gateway's rules other than by a rule's match, by reason",
            &["reason"]
        )
        .expect("metric registers once")
    })
    .with_label_values(&[reason])
    .inc();
}

/// The calls of the gateways' external guards (`mcp/callout/`): counted by gateway and
/// `outcome` (`allow`, `deny`, `replace`, `timeout`, `error`, `busy`) and, when the guard was
/// called (`elapsed`), timed by gateway.
pub(crate) fn guard_call(gateway: &str, outcome: &'static str, elapsed: Option<Duration>) {
    struct Guards {
        calls: IntCounterVec,
        latency: HistogramVec,
    }
    static G: OnceLock<Guards> = OnceLock::new();
    let g = G.get_or_init(|| Guards {
        calls: register_int_counter_vec!(
            "toolgate_guard_calls_total",
            "Calls of the gateways' external guards, by gateway and outcome (allow, deny, replace, timeout, error, busy)",
            &["gateway", "outcome"]
        )
        .expect("metric registers once"),
        latency: register_histogram_vec!(
            "toolgate_guard_call_duration_seconds",
            "How long the gateways' external guards took to answer, by gateway",
            &["gateway"],
            OPERATION_BUCKETS.to_vec()
        )
        .expect("metric registers once"),
    });
    let gateway = mcp().gateways.fold(gateway);
    g.calls.with_label_values(&[gateway, outcome]).inc();
    if let Some(elapsed) = elapsed {
        g.latency.with_label_values(&[gateway]).observe(elapsed.as_secs_f64());
    }
}

/// A request refused because the record it names was written by a newer toolgate (`kind`
/// `gateway`): during a rolling upgrade, the requests an older instance turned away.
pub(crate) fn newer_record_refused(kind: &'static str) {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    C.get_or_init(|| {
        register_int_counter_vec!(
            "toolgate_newer_record_refusals_total",
            "Requests refused because the record they name was written by a newer toolgate, by kind",
            &["kind"]
        )
        .expect("metric registers once")
    })
    .with_label_values(&[kind])
    .inc();
}

/// The audit chain in the store no longer extends the last checkpoint this instance signed
/// (`reason`: `checkpoint_missing`, `checkpoint_changed`, `checkpoints_after`, `entries`);
/// counted once per organisation until a checkpoint is signed again. The shipped alert
/// `ToolgateAuditTampered` fires on any increase.
pub(crate) fn audit_tampered(reason: &'static str) {
    audit_tampered_total().with_label_values(&[reason]).inc();
}

/// The reasons of `toolgate_audit_tampered_total`, each series there from zero.
const AUDIT_TAMPER_REASONS: [&str; 4] = ["checkpoint_missing", "checkpoint_changed", "checkpoints_after", "entries"];

fn audit_tampered_total() -> &'static IntCounterVec {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    C.get_or_init(|| {
        register_int_counter_vec!(
            "toolgate_audit_tampered_total",
            "Audit chains found no longer extending the last checkpoint this instance signed, by reason",
            &["reason"]
        )
        .expect("metric registers once")
    })
}

/// A request toolgate made of an app on a client's behalf (app ids come from the
/// configuration: no cap).
pub(crate) fn mcp_client_operation(method: &str, tool: Option<&str>, error: ErrorType, app: &str, elapsed: Duration) {
    observe_operation(&mcp().client_ops, method, tool, error, app, elapsed);
}

/// One observation of an operation histogram; `last` is its gateway or app label.
fn observe_operation(
    ops: &HistogramVec,
    method: &str,
    tool: Option<&str>,
    error: ErrorType,
    last: &str,
    elapsed: Duration,
) {
    let mut buf = itoa::Buffer::new();
    let tool = tool.map_or("", |t| mcp().tools.fold(t));
    let labels = [method_label(method), tool, error.label(&mut buf), last];
    ops.with_label_values(&labels).observe(elapsed.as_secs_f64());
}

pub(crate) fn mcp_session_ended(lifetime: Duration) {
    mcp().session_duration.observe(lifetime.as_secs_f64());
}

/// A group of `sessions` new MCP sessions goes to the store in one transaction.
pub(crate) fn session_group_committed(sessions: usize) {
    mcp().session_groups.observe(sessions as f64);
}

struct Edge {
    rejections: IntCounterVec,
    rate_limited: IntCounterVec,
    store_ops: HistogramVec,
    spans_dropped: IntCounter,
}

fn edge() -> &'static Edge {
    static E: OnceLock<Edge> = OnceLock::new();
    E.get_or_init(|| Edge {
        rejections: register_int_counter_vec!(
            "toolgate_filter_rejections_total",
            "Requests an edge filter refused, by filter and reason (the error code)",
            &["filter", "reason"]
        )
        .expect("metric registers once"),
        rate_limited: register_int_counter_vec!(
            "toolgate_rate_limited_requests_total",
            "Requests refused with 429, by rate-limit bucket and reason",
            &["bucket", "reason"]
        )
        .expect("metric registers once"),
        store_ops: register_histogram_vec!(
            "toolgate_store_operation_duration_seconds",
            "Time of storage operations, by operation",
            &["operation"],
            vec![0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0]
        )
        .expect("metric registers once"),
        spans_dropped: register_int_counter!(
            "toolgate_trace_spans_dropped_total",
            "Spans not exported: queue full or endpoint refused"
        )
        .expect("metric registers once"),
    })
}

/// A filter refused a request; `bucket` is the rate-limit bucket it was charged to (a 429's).
pub(crate) fn filter_rejected(filter: &str, reason: &str, bucket: Option<&str>) {
    let e = edge();
    e.rejections.with_label_values(&[filter, reason]).inc();
    if let Some(bucket) = bucket {
        e.rate_limited.with_label_values(&[bucket, reason]).inc();
    }
}

/// Spans the trace exporter dropped: its queue was full, or the endpoint refused them.
pub(crate) fn trace_spans_dropped(spans: usize) {
    edge().spans_dropped.inc_by(spans as u64);
}

pub(crate) fn store_operation(operation: &'static str, elapsed: Duration) {
    edge().store_ops.with_label_values(&[operation]).observe(elapsed.as_secs_f64());
}

/// The hidden-text counter's labels are the classes of `base::hidden_text`, the actions and the
/// places ([`HIDDEN_TEXT_PLACES`]): a bounded set, so no cap.
fn hidden_text_total() -> &'static IntCounterVec {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    C.get_or_init(|| {
        register_int_counter_vec!(
            "toolgate_hidden_text_total",
            "Hidden text found in what an app sends: its tool, prompt or resource definitions when a \
             catalogue was built (where=definition; stripped or withheld), and its answers \
             (stripped, blocked or logged), by class, action and where",
            &["class", "action", "where"]
        )
        .expect("metric registers once")
    })
}

/// One finding of hidden text: `class` as `base::hidden_text` names it, `action` (`stripped` or
/// `withheld` for a definition; `stripped`, `blocked` or `logged` for an answer), `place` one
/// of [`HIDDEN_TEXT_PLACES`].
pub(crate) fn hidden_text(class: &str, action: &str, place: &str) {
    hidden_text_total().with_label_values(&[class, action, place]).inc();
}

/// Secrets found in the apps' answers, by kind (`mcp::redact`) and action (`redacted`, `logged`).
fn redacted_total() -> &'static IntCounterVec {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    C.get_or_init(|| {
        register_int_counter_vec!(
            "toolgate_redacted_total",
            "Secrets found in what the apps answered, by kind and action (redacted or logged)",
            &["kind", "action"]
        )
        .expect("metric registers once")
    })
}

/// `n` secrets of `kind` found in an answer.
pub(crate) fn redacted(kind: &str, action: &str, n: u64) {
    redacted_total().with_label_values(&[kind, action]).inc_by(n);
}

/// A gateway's app tool definition became pending (`tool_policy`), by why: `changed`,
/// `added` or `hidden_text`. No gateway label: the kinds are few, the gateways are not.
pub(crate) fn tool_change_detected(kind: &'static str) {
    static C: OnceLock<IntCounterVec> = OnceLock::new();
    C.get_or_init(|| {
        register_int_counter_vec!(
            "toolgate_tool_changes_total",
            "Tool definitions of gateways' apps that became pending under the gateway's tool_policy, by kind",
            &["kind"]
        )
        .expect("metric registers once")
    })
    .with_label_values(&[kind])
    .inc();
}

/// What one tenant was refused at its bounds on the MCP endpoint (Decision 23), by `scope`:
/// `session`, `key` or `organization`. No organisation or key label: the scopes are three,
/// the tenants are not.
struct TenantBounds {
    streams: IntCounterVec,
    resumable: IntCounterVec,
}

fn tenant_bounds() -> &'static TenantBounds {
    static B: OnceLock<TenantBounds> = OnceLock::new();
    B.get_or_init(|| TenantBounds {
        streams: register_int_counter_vec!(
            "toolgate_mcp_stream_refusals_total",
            "Long-lived MCP streams (GET streams, subscriptions/listen) refused at a bound, by the bound's scope",
            &["scope"]
        )
        .expect("metric registers once"),
        resumable: register_int_counter_vec!(
            "toolgate_mcp_resumable_refusals_total",
            "MCP calls refused because their key's or organisation's resumable buffers hold their bound of bytes, \
             by the bound's scope",
            &["scope"]
        )
        .expect("metric registers once"),
    })
}

/// A stream refused at the bound of `scope` (`mcp.streams`).
pub(crate) fn mcp_stream_refused(scope: &'static str) {
    tenant_bounds().streams.with_label_values(&[scope]).inc();
}

/// A call refused at the bound of `scope` on resumable bytes (`mcp.resumable`).
pub(crate) fn mcp_resumable_refused(scope: &'static str) {
    tenant_bounds().resumable.with_label_values(&[scope]).inc();
}

/// A gauge read when Prometheus scrapes rather than kept up to date on every change: the
/// number of live sessions, open streams or running processes is a function of the running
/// server ([`gauge_at_scrape`]).
struct ScrapeGauge<G> {
    gauge: G,
    read: Box<dyn Fn(&G) + Send + Sync>,
}

impl<G: Collector + Clone + Send + Sync> Collector for ScrapeGauge<G> {
    fn desc(&self) -> Vec<&Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        (self.read)(&self.gauge);
        self.gauge.collect()
    }
}

/// A gauge whose value `read` gives at each scrape.
pub(crate) fn gauge_at_scrape(name: &str, help: &str, read: impl Fn() -> i64 + Send + Sync + 'static) {
    let registered = IntGauge::new(name, help).and_then(|gauge| {
        let read = Box::new(move |g: &IntGauge| g.set(read()));
        pingora_prometheus::prometheus::register(Box::new(ScrapeGauge { gauge, read }))
    });
    if let Err(e) = registered {
        tracing::warn!(metric = name, error = %e, "cannot register a gauge");
    }
}

/// A gauge with one label whose series `read` gives at each scrape (a series not given is
/// gone).
pub(crate) fn gauge_vec_at_scrape(
    name: &str,
    help: &str,
    label: &str,
    read: impl Fn() -> Vec<(String, i64)> + Send + Sync + 'static,
) {
    let registered = IntGaugeVec::new(Opts::new(name, help), &[label]).and_then(|gauge| {
        let read = Box::new(move |g: &IntGaugeVec| {
            g.reset();
            for (value, n) in read() {
                g.with_label_values(&[&value]).set(n);
            }
        });
        pingora_prometheus::prometheus::register(Box::new(ScrapeGauge { gauge, read }))
    });
    if let Err(e) = registered {
        tracing::warn!(metric = name, error = %e, "cannot register a gauge");
    }
}

struct Metrics {
    requests: IntCounterVec,
    latency: HistogramVec,
    /// The children of the two vectors for every route class, and of `requests` for the common
    /// statuses, looked up once: `with_label_values` hashes the labels and takes a lock on every
    /// call, and this runs on every request.
    by_route: Vec<RouteMetrics>,
    log_pending: IntGauge,
    log_dropped: IntCounter,
}

struct RouteMetrics {
    route: &'static str,
    latency: Histogram,
    by_status: Vec<(u16, IntCounter)>,
}

/// Statuses whose counters are looked up in advance; others are looked up per request.
const COMMON_STATUSES: [u16; 12] = [200, 201, 202, 204, 400, 401, 403, 404, 406, 429, 500, 502];

fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(|| {
        let requests = register_int_counter_vec!(
            "toolgate_requests_total",
            "Requests answered, by route class and status code",
            &["route", "status"]
        )
        .expect("metric registers once");
        let latency = register_histogram_vec!(
            "toolgate_request_duration_seconds",
            "Time from request to response, by route class",
            &["route"],
            vec![0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
        )
        .expect("metric registers once");
        let by_route = crate::base::route::Route::LABELS
            .iter()
            .map(|&route| RouteMetrics {
                route,
                latency: latency.with_label_values(&[route]),
                by_status: COMMON_STATUSES
                    .iter()
                    .map(|&status| (status, requests.with_label_values(&[route, itoa::Buffer::new().format(status)])))
                    .collect(),
            })
            .collect();
        Metrics {
            requests,
            latency,
            by_route,
            log_pending: register_int_gauge!(
                "toolgate_request_log_pending",
                "Request-log entries waiting to be written, as of the last flush"
            )
            .expect("metric registers once"),
            log_dropped: register_int_counter!(
                "toolgate_request_log_dropped_total",
                "Request-log entries dropped because the buffer was full"
            )
            .expect("metric registers once"),
        }
    })
}

/// Registers the metrics so they are exported (with zero values) from the start, with the
/// label caps of the configuration.
pub(crate) fn init(limits: LabelLimits) {
    let _ = LIMITS.set(limits);
    metrics();
    mcp();
    // Every bucket's refusals from zero: `rate()` over a series that appears with its first
    // refusal misses that refusal, and an alert over an absent series never fires.
    let e = edge();
    for bucket in toolgate_filters::rate_limit::Bucket::ALL {
        e.rate_limited.with_label_values(&[bucket.as_str(), "RATE_LIMITED"]);
    }
    for class in crate::base::hidden_text::HiddenClass::ALL {
        for action in ["stripped", "withheld"] {
            hidden_text_total().with_label_values(&[class.as_str(), action, "definition"]);
        }
    }
    for reason in AUDIT_TAMPER_REASONS {
        audit_tampered_total().with_label_values(&[reason]);
    }
    let b = tenant_bounds();
    for scope in ["session", "key", "organization"] {
        b.streams.with_label_values(&[scope]);
    }
    for scope in ["key", "organization"] {
        b.resumable.with_label_values(&[scope]);
    }
    match register_int_gauge_vec!(
        "toolgate_build_info",
        "The running build: always 1, its version and commit (`unknown` when built without git) as labels",
        &["version", "commit"]
    ) {
        Ok(g) => g.with_label_values(&[env!("CARGO_PKG_VERSION"), env!("TOOLGATE_COMMIT")]).set(1),
        Err(e) => tracing::warn!(error = %e, "cannot register toolgate_build_info"),
    }
}

pub(crate) fn observe_request(route: &'static str, status: u16, elapsed: Duration) {
    let m = metrics();
    let known = m.by_route.iter().find(|r| r.route == route);
    match known.and_then(|r| r.by_status.iter().find(|(s, _)| *s == status)) {
        Some((_, counter)) => counter.inc(),
        None => m.requests.with_label_values(&[route, itoa::Buffer::new().format(status)]).inc(),
    }
    match known {
        Some(r) => r.latency.observe(elapsed.as_secs_f64()),
        None => m.latency.with_label_values(&[route]).observe(elapsed.as_secs_f64()),
    }
}

/// The request log's backlog at a flush: where a store that cannot keep up shows.
pub(crate) fn request_log_pending(entries: usize) {
    metrics().log_pending.set(i64::try_from(entries).unwrap_or(i64::MAX));
}

pub(crate) fn request_log_dropped(entries: usize) {
    metrics().log_dropped.inc_by(u64::try_from(entries).unwrap_or(u64::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_route_and_status_whether_looked_up_in_advance_or_not() {
        let m = metrics();
        let count = |route: &str, status: &str| m.requests.with_label_values(&[route, status]).get();
        let seen = |route: &str| m.latency.with_label_values(&[route]).get_sample_count();
        let (ok, teapot, gw, odd) = (count("gateway", "200"), count("gateway", "418"), seen("gateway"), seen("odd"));
        observe_request("gateway", 200, Duration::from_micros(150));
        observe_request("gateway", 418, Duration::from_micros(150));
        // A label outside `Route::LABELS` still counts.
        observe_request("odd", 200, Duration::from_micros(150));
        assert_eq!(count("gateway", "200"), ok + 1);
        assert_eq!(count("gateway", "418"), teapot + 1);
        assert_eq!(seen("gateway"), gw + 2);
        assert_eq!(seen("odd"), odd + 1);
        assert_eq!(count("odd", "200"), 1);
    }

    #[test]
    fn client_chosen_label_values_are_capped_and_fold_into_other() {
        let cap = LabelCap::new(2);
        assert_eq!((cap.fold("a"), cap.fold("b"), cap.fold("a")), ("a", "b", "a"));
        assert_eq!(cap.fold("c"), "other", "beyond the cap");
        assert_eq!(cap.fold("b"), "b", "values already seen keep their series");
        assert_eq!(LabelCap::new(0).fold("a"), "", "a cap of 0 turns the label off");
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("made/up"), "other");
        let mut buf = itoa::Buffer::new();
        assert_eq!(ErrorType::Code(-32602).label(&mut buf), "-32602");
        assert_eq!(ErrorType::ToolError.label(&mut buf), "tool_error");
        assert_eq!(ErrorType::None.label(&mut buf), "");
    }
}
