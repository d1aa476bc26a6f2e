//! The five targets, one file each, and the outcome signature they report.

pub mod client_message;
pub mod config;
pub mod jsonrpc;
pub mod request_view;
pub mod sse;

use crate::Target;

pub static ALL: [Target; 5] = [
    Target { name: "jsonrpc", run: jsonrpc::run, max_len: 64 * 1024, dictionary: JSON, extra_seeds: &[] },
    Target { name: "client_message", run: client_message::run, max_len: 64 * 1024, dictionary: JSON, extra_seeds: &[] },
    Target { name: "sse", run: sse::run, max_len: 64 * 1024, dictionary: SSE, extra_seeds: &[] },
    Target {
        name: "config",
        run: config::run,
        max_len: 16 * 1024,
        dictionary: YAML,
        extra_seeds: &["../conf", "../conf/examples"],
    },
    Target { name: "request_view", run: request_view::run, max_len: 4 * 1024, dictionary: REQUEST, extra_seeds: &[] },
];

/// What a target did with one input, as a set of features in a 4096-bit map: the driver keeps
/// an input that shows a feature no earlier input showed (libFuzzer's rule, with outcomes in
/// place of covered edges). A feature is a pair of consecutive events (AFL's edges), so the
/// order of what happened counts without every combination being new.
///
/// Texts are reduced to their shape first: only plain lowercase words are kept, so indices,
/// positions, paths, addresses and anything quoted (the offending value serde quotes) are
/// dropped, and two bad URLs are the same event while another message is not.
pub struct Outcome {
    bits: Features,
    prev: u64,
}

/// The features of one input.
pub type Features = [u64; 64];

impl Default for Outcome {
    fn default() -> Self {
        Outcome::new()
    }
}

impl Outcome {
    pub fn new() -> Outcome {
        Outcome { bits: [0; 64], prev: 0 }
    }

    fn event(&mut self, h: u64) {
        let f = crate::fnv1a(&(h ^ self.prev.rotate_left(17)).to_le_bytes()) % 4096;
        self.bits[(f / 64) as usize] |= 1 << (f % 64);
        self.prev = h;
    }

    pub fn add(&mut self, tag: &str) {
        self.event(crate::fnv1a(tag.as_bytes()));
    }

    pub fn add_text(&mut self, text: &str) {
        // What is quoted is the input's own text: keep what comes before the first quote and
        // after the last one.
        let (head, tail) = match (text.find(['`', '"']), text.rfind(['`', '"'])) {
            (Some(first), Some(last)) => (&text[..first], &text[last + 1..]),
            _ => (text, ""),
        };
        // The message's own words are plain lowercase English; anything else (numbers, paths,
        // addresses, the input's own keys) is the input's. At most six words each side.
        fn words(part: &str) -> Vec<&str> {
            part.split_whitespace()
                .map(|w| w.trim_end_matches([',', '.', ';']))
                .filter(|w| !w.is_empty() && w.len() <= 24 && w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
                .take(8)
                .collect()
        }
        // Before the quote, the words nearest to it say what is wrong with the value (`unknown
        // field`, `invalid type: string`); further back the input's own unquoted keys may stand.
        let head = words(head);
        let head = &head[head.len().saturating_sub(3)..];
        let shape = [head.join(" "), words(tail).join(" ")].join(" | ").into_bytes();
        self.event(crate::fnv1a(&shape) ^ 0x0000_7465_7874);
    }

    /// A path of configuration fields (`apps[3].timeouts.total_ms`) as its last field
    /// (`total_ms`), or `*` for a name the schema does not have (a map key the input chose).
    /// The whole path would be a new event for each nesting the mutator stacks up; the message
    /// beside it tells the sections apart well enough.
    pub fn add_field(&mut self, path: &str, known: &[&[u8]]) {
        let shape = |segment: Option<&str>| -> u64 {
            let name = segment.unwrap_or("").split('[').next().unwrap_or("").as_bytes();
            let is_known =
                !name.is_empty() && known.iter().any(|k| k.strip_suffix(b": ").or(k.strip_suffix(b":")) == Some(name));
            crate::fnv1a(if is_known { name } else { b"*" })
        };
        self.event(shape(path.rsplit('.').next()) ^ 0x0066_6965_6c64);
    }

    /// The next event is not paired with the previous one: for two facts that vary
    /// independently, whose every combination would otherwise be a new feature.
    pub fn separate(&mut self) {
        self.prev = 0;
    }

    /// A count, bucketed (0, 1, 2, 3-4, 5-8, ...) so that every length is not a new event.
    pub fn add_count(&mut self, n: usize) {
        self.event(0x636f_756e_7400 + u64::from(usize::BITS - n.leading_zeros()));
    }

    pub fn finish(self) -> Features {
        self.bits
    }
}

const JSON: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"\\udc00\\ud800",
    b"\"jsonrpc\":\"2.0\"",
    b"\"jsonrpc\"",
    b"\"2.0\"",
    b"\"2\\u002e0\"",
    b"\"id\":",
    b"\"method\":",
    b"\"params\":",
    b"\"result\":",
    b"\"error\":",
    b"\"code\":",
    b"\"message\":",
    b"\"data\":",
    b"\"name\":",
    b"\"arguments\":",
    b"\"cursor\":",
    b"\"_meta\":",
    b"\"initialize\"",
    b"\"tools/call\"",
    b"\"tools/list\"",
    b"\"notifications/cancelled\"",
    b"\"server/discover\"",
    b"null",
    b"true",
    b"false",
    b"0",
    b"-0",
    b"-1",
    b"1.5",
    b"1e309",
    b"-1e-400",
    b"9007199254740993",
    b"18446744073709551615",
    b"18446744073709551616",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"{}",
    b"[]",
    b"[[[[[[[[[[[[[[[[",
    b"{\"a\":{\"a\":{\"a\":{\"a\":",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc3\x28",
    b"\xf0\x9f\x92\xa9",
    b" \t\r\n",
];

const SSE: &[&[u8]] = &[
    b"data:",
    b"data: ",
    b"data",
    b"event:",
    b"event: message",
    b"event: ping",
    b"id:",
    b"id: 1",
    b"id: a\0b",
    b"retry: 100",
    b":",
    b": ping",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"\r\r",
    b"\r\n\r\n",
    b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
    b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}",
    b"[{\"jsonrpc\":\"2.0\",\"method\":\"a\"},{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-1,\"message\":\"m\"}}]",
    b"{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":\"ping\"}",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\0",
];

pub(crate) const YAML: &[&[u8]] = &[
    b"\n",
    b"\n  ",
    b"\n    ",
    b"- ",
    b": ",
    b"{",
    b"}",
    b"[",
    b"]",
    b"&a ",
    b"*a",
    b"<<: *a",
    b"!!str ",
    b"!!binary ",
    b"!tag ",
    b"~",
    b"null",
    b"true",
    b"yes",
    b"0x10",
    b"0o7",
    b".inf",
    b"-.inf",
    b".nan",
    b"1e309",
    b"-1",
    b"18446744073709551616",
    b"|\n  ",
    b">-\n  ",
    b"---\n",
    b"...\n",
    b"'",
    b"\"",
    b"\"\\u0000\"",
    b"#",
    b"%YAML 1.2\n",
    b"environment: ",
    b"production",
    b"development",
    b"server:",
    b"listen: ",
    b"metrics_listen: ",
    b"127.0.0.1:0",
    b"[::1]:0",
    b"0.0.0.0:65536",
    b"public_url: ",
    b"http://localhost:8080",
    b"trusted_proxies: ",
    b"10.0.0.0/8",
    b"::ffff:0:0/96",
    b"threads: ",
    b"max_body_bytes: ",
    b"grace_period_secs: ",
    b"storage:",
    b"backend: ",
    b"embedded",
    b"redis",
    b"path: ",
    b"apps:",
    b"id: ",
    b"name: ",
    b"description: ",
    b"category: ",
    b"status: ",
    b"auth_types: ",
    b"[api_key, oauth]",
    b"url: ",
    b"https://x/mcp",
    b"command: ",
    b"env: ",
    b"builtin: ",
    b"time",
    b"rate_limit: ",
    b"timeouts: ",
    b"connect_ms: ",
    b"credential_header: ",
    b"protocol_version: ",
    b"2025-06-18",
    b"oauth: ",
    b"authorize_url: ",
    b"token_url: ",
    b"client_id: ",
    b"scopes: ",
    b"organizations:",
    b"tier: ",
    b"users:",
    b"role: ",
    b"owner",
    b"email: ",
    b"organization: ",
    b"api_keys:",
    b"user: ",
    b"sha256: ",
    b"expires_at: ",
    b"2030-01-01T00:00:00Z",
    b"bypass_ip_whitelist: ",
    b"rate_limits:",
    b"tiers:",
    b"requests_per_hour: ",
    b"unlimited",
    b"requests_per_minute: ",
    b"burst: ",
    b"concurrent: ",
    b"default_tier: ",
    b"unauthenticated: ",
    b"write_share: ",
    b"limits:",
    b"service_account_multiplier: ",
    b"mcp:",
    b"session_idle_timeout_secs: ",
    b"allowed_origins: ",
    b"max_stdio_processes: ",
    b"page_size: ",
    b"jwt:",
    b"issuer: ",
    b"audience: ",
    b"leeway_secs: ",
    b"max_lifetime_secs: ",
    b"jwks_url: ",
    b"insecure_skip_issuer_audience: ",
];

const REQUEST: &[&[u8]] = &[
    b"\n",
    b"GET",
    b"POST",
    b"DELETE",
    b"PATCH",
    b"/v1",
    b"/api/v1",
    b"/gateway/",
    b"/mcp",
    b"/gateway/g1/mcp",
    b"/gateway//mcp",
    b"/healthz",
    b"/metrics",
    b"/logs/analytics",
    b"/webhooks",
    b"/deliveries",
    b"/batch",
    b"?api_key=",
    b"&api_key=",
    b"%2F",
    b"//",
    b"/../",
    b"ag_owner",
    b"ag_gw",
    b"ag_sa",
    b"ag_",
    b"Bearer ",
    b"bearer ",
    b"Basic ",
    b"eyJ",
    b"127.0.0.1",
    b"10.0.0.1",
    b"10.0.0.0/8",
    b"0.0.0.0/0",
    b"::/0",
    b"::1",
    b"::ffff:10.0.0.1",
    b"::ffff:0:0/96",
    b"fe80::1%eth0",
    b"255.255.255.255/32",
    b"203.0.113.7",
    b", ",
    b"unknown",
    b"{\"enforce_ip_whitelist\":true,\"ip_whitelist\":[\"10.0.0.0/8\"]}",
    b"\"whitelist\":[{\"ip\":\"::ffff:10.0.0.1/120\",\"rate_limit_multiplier\":2}]",
    b"\"allowed_ips\":[\"0.0.0.0/0\"]",
    b"\"rate_limit_multiplier\":",
    b"1e308",
    b"5e-324",
    b"*",
    b"admin",
    b"gateways:*",
    b"gateways:read",
    b"apps:write",
    b"sessions:manage",
    b"logs:read",
    b"owner",
    b"admin",
    b"developer",
    b"viewer",
    b"\t",
    b"\r",
    b"\0",
    b"\xff",
];
