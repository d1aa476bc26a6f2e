//! The `time` built-in app: one tool, `get_current_time`, formatting "now" in any IANA zone.
//!
//! The pattern language is the moment.js / day.js one that most people (and models) already know,
//! restricted to the tokens listed in [`TOKENS_DOC`]. It is implemented here rather than mapped
//! onto chrono's `strftime`, because strftime has no escaping that a caller could rely on and
//! would let `%`-sequences through that we do not document.

use async_trait::async_trait;
use chrono::{DateTime, Datelike, Offset, SecondsFormat, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use serde_json::{json, Value};

use super::{error_result, BuiltinApp, BuiltinError};

/// Name of the app in configuration (`builtin: time`).
pub(crate) const NAME: &str = "time";
/// The one tool of the app.
pub(crate) const TOOL_GET_CURRENT_TIME: &str = "get_current_time";

/// Longest accepted `format`; bounds the work and the size of the answer.
const MAX_FORMAT_LEN: usize = 1024;

/// The token table, as shown to callers in the tool description.
pub(crate) const TOKENS_DOC: &str = "Tokens: YYYY (2025), YY (25), MMMM (January), MMM (Jan), MM (01-12), \
M (1-12), DD (01-31), D (1-31), dddd (Monday), ddd (Mon), HH (00-23), H (0-23), hh (01-12), \
h (1-12), mm (00-59), m (0-59), ss (00-59), s (0-59), SSS (milliseconds 000-999), A (AM/PM), \
a (am/pm), Z (+05:30), ZZ (+0530). Text inside [brackets] is copied literally, e.g. \
\"YYYY-MM-DD[T]HH:mm:ss\"; any other character is copied as is.";

/// The `time` app. `clock` is injectable so that tests are deterministic.
pub(crate) struct TimeApp {
    clock: fn() -> DateTime<Utc>,
}

impl Default for TimeApp {
    fn default() -> Self {
        Self::new()
    }
}

impl TimeApp {
    pub(crate) fn new() -> Self {
        Self { clock: Utc::now }
    }

    /// A `TimeApp` whose "now" comes from `clock` (tests, benchmarks).
    #[cfg(test)]
    pub(crate) fn with_clock(clock: fn() -> DateTime<Utc>) -> Self {
        Self { clock }
    }

    fn tool() -> Value {
        json!({
            "name": TOOL_GET_CURRENT_TIME,
            "title": "Get current time",
            "description": format!(
                "Returns the current date and time formatted with a pattern, in an IANA time zone \
                 (default UTC). {TOKENS_DOC}"
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "format": {
                        "type": "string",
                        "description": format!("Date pattern. {TOKENS_DOC}"),
                        "examples": ["YYYY-MM-DD HH:mm:ss", "dddd, MMMM D, YYYY h:mm A", "YYYY-MM-DD[T]HH:mm:ss.SSSZ"],
                    },
                    "timezone": {
                        "type": "string",
                        "description": "IANA time zone name such as Europe/Paris or America/New_York. Default: UTC.",
                    }
                },
                "required": ["format"],
                "additionalProperties": false,
            },
            "outputSchema": {
                "type": "object",
                "properties": {
                    "time": { "type": "string", "description": "The time formatted with `format`." },
                    "timezone": { "type": "string", "description": "The IANA zone used." },
                    "iso8601": { "type": "string", "description": "The same instant in RFC 3339 with milliseconds and the zone's offset." },
                },
                "required": ["time", "timezone", "iso8601"],
            },
            "annotations": {
                "title": "Get current time",
                "readOnlyHint": true,
                "destructiveHint": false,
                "idempotentHint": false,
                "openWorldHint": false,
            }
        })
    }

    /// The `CallToolResult` for `arguments` at instant `now`.
    pub(crate) fn render(now: DateTime<Utc>, arguments: &Value) -> Value {
        let args = match arguments {
            Value::Object(m) => m,
            Value::Null => return error_result("Missing required argument: format"),
            _ => return error_result("Arguments must be an object"),
        };
        let format = match args.get("format") {
            Some(Value::String(s)) => s.as_str(),
            None | Some(Value::Null) => return error_result("Missing required argument: format"),
            Some(_) => return error_result("Argument `format` must be a string"),
        };
        if format.len() > MAX_FORMAT_LEN {
            return error_result(format!("Argument `format` is longer than {MAX_FORMAT_LEN} characters"));
        }
        let zone_name = match args.get("timezone") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim(),
            None | Some(Value::Null) | Some(Value::String(_)) => "UTC",
            Some(_) => return error_result("Argument `timezone` must be a string"),
        };
        let tz: Tz = match zone_name.parse() {
            Ok(tz) => tz,
            Err(_) => {
                return error_result(format!(
                    "Unknown time zone: \"{zone_name}\". Use an IANA name such as \"Europe/Paris\", \"America/New_York\" or \"UTC\"."
                ))
            }
        };
        let local = now.with_timezone(&tz);
        let text = format_time(&local, format);
        json!({
            "content": [{ "type": "text", "text": text }],
            "structuredContent": {
                "time": text,
                "timezone": tz.name(),
                "iso8601": local.to_rfc3339_opts(SecondsFormat::Millis, false),
            },
        })
    }
}

#[async_trait]
impl BuiltinApp for TimeApp {
    fn name(&self) -> &'static str {
        NAME
    }

    fn tools(&self) -> Vec<Value> {
        vec![Self::tool()]
    }

    async fn call(&self, name: &str, arguments: Value) -> Result<Value, BuiltinError> {
        if name != TOOL_GET_CURRENT_TIME {
            return Err(BuiltinError::UnknownTool(name.to_string()));
        }
        Ok(Self::render((self.clock)(), &arguments))
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Tokens, longest first where one is a prefix of another, so that a greedy scan is correct.
const TOKENS: &[&str] = &[
    "YYYY", "YY", "MMMM", "MMM", "MM", "M", "dddd", "ddd", "DD", "D", "HH", "H", "hh", "h", "mm", "m", "ss", "s",
    "SSS", "A", "a", "ZZ", "Z",
];

/// Formats `dt` with a moment.js-style `pattern` (see [`TOKENS_DOC`]).
///
/// Never fails: unknown letters are copied, an unterminated `[` copies the rest of the pattern.
pub(crate) fn format_time<T: TimeZone>(dt: &DateTime<T>, pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut rest = pattern;
    while let Some(c) = rest.chars().next() {
        if c == '[' {
            let body = &rest[1..];
            match body.find(']') {
                Some(end) => {
                    out.push_str(&body[..end]);
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str(body);
                    rest = "";
                }
            }
            continue;
        }
        match TOKENS.iter().find(|t| rest.starts_with(**t)) {
            Some(token) => {
                push_token(&mut out, dt, token);
                rest = &rest[token.len()..];
            }
            None => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    out
}

fn push_token<T: TimeZone>(out: &mut String, dt: &DateTime<T>, token: &str) {
    use std::fmt::Write;
    let hour12 = match dt.hour() % 12 {
        0 => 12,
        h => h,
    };
    // Writing into a String cannot fail.
    let _ = match token {
        "YYYY" => write!(out, "{:04}", dt.year()),
        "YY" => write!(out, "{:02}", dt.year().rem_euclid(100)),
        "MMMM" => write!(out, "{}", MONTHS[dt.month0() as usize]),
        "MMM" => write!(out, "{}", &MONTHS[dt.month0() as usize][..3]),
        "MM" => write!(out, "{:02}", dt.month()),
        "M" => write!(out, "{}", dt.month()),
        "dddd" => write!(out, "{}", WEEKDAYS[dt.weekday().num_days_from_monday() as usize]),
        "ddd" => write!(out, "{}", &WEEKDAYS[dt.weekday().num_days_from_monday() as usize][..3]),
        "DD" => write!(out, "{:02}", dt.day()),
        "D" => write!(out, "{}", dt.day()),
        "HH" => write!(out, "{:02}", dt.hour()),
        "H" => write!(out, "{}", dt.hour()),
        "hh" => write!(out, "{:02}", hour12),
        "h" => write!(out, "{}", hour12),
        "mm" => write!(out, "{:02}", dt.minute()),
        "m" => write!(out, "{}", dt.minute()),
        "ss" => write!(out, "{:02}", dt.second()),
        "s" => write!(out, "{}", dt.second()),
        // A leap second shows as nanosecond >= 1e9; clamp to 999.
        "SSS" => write!(out, "{:03}", (dt.nanosecond() / 1_000_000).min(999)),
        "A" => write!(out, "{}", if dt.hour() < 12 { "AM" } else { "PM" }),
        "a" => write!(out, "{}", if dt.hour() < 12 { "am" } else { "pm" }),
        "Z" | "ZZ" => {
            let secs = dt.offset().fix().local_minus_utc();
            let sign = if secs < 0 { '-' } else { '+' };
            let mins = secs.unsigned_abs() / 60;
            let sep = if token == "Z" { ":" } else { "" };
            write!(out, "{sign}{:02}{sep}{:02}", mins / 60, mins % 60)
        }
        _ => Ok(()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::FixedOffset;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn fmt_utc(s: &str, pattern: &str) -> String {
        format_time(&at(s), pattern)
    }

    #[test]
    fn every_token() {
        let t = "2025-03-07T04:05:06.789Z"; // a Friday
        let cases = [
            ("YYYY", "2025"),
            ("YY", "25"),
            ("MMMM", "March"),
            ("MMM", "Mar"),
            ("MM", "03"),
            ("M", "3"),
            ("dddd", "Friday"),
            ("ddd", "Fri"),
            ("DD", "07"),
            ("D", "7"),
            ("HH", "04"),
            ("H", "4"),
            ("hh", "04"),
            ("h", "4"),
            ("mm", "05"),
            ("m", "5"),
            ("ss", "06"),
            ("s", "6"),
            ("SSS", "789"),
            ("A", "AM"),
            ("a", "am"),
            ("Z", "+00:00"),
            ("ZZ", "+0000"),
        ];
        for (p, want) in cases {
            assert_eq!(fmt_utc(t, p), want, "token {p}");
        }
    }

    #[test]
    fn combined_patterns() {
        let t = "2024-12-31T23:59:58.001Z";
        assert_eq!(fmt_utc(t, "YYYY-MM-DD HH:mm:ss"), "2024-12-31 23:59:58");
        assert_eq!(fmt_utc(t, "YYYY-MM-DD[T]HH:mm:ss.SSSZ"), "2024-12-31T23:59:58.001+00:00");
        assert_eq!(fmt_utc(t, "dddd, MMMM D, YYYY h:mm A"), "Tuesday, December 31, 2024 11:59 PM");
        assert_eq!(fmt_utc(t, "D/M/YY h:m:s a"), "31/12/24 11:59:58 pm");
        assert_eq!(fmt_utc(t, "YYYYMMDDHHmmss"), "20241231235958");
    }

    #[test]
    fn twelve_hour_clock_edges() {
        assert_eq!(fmt_utc("2025-01-01T00:00:00Z", "h hh A a"), "12 12 AM am");
        assert_eq!(fmt_utc("2025-01-01T11:00:00Z", "h A"), "11 AM");
        assert_eq!(fmt_utc("2025-01-01T12:00:00Z", "h hh A a H"), "12 12 PM pm 12");
        assert_eq!(fmt_utc("2025-01-01T13:07:00Z", "h:mm A"), "1:07 PM");
    }

    #[test]
    fn literals_and_unknown_characters() {
        let t = "2025-03-07T04:05:06Z";
        assert_eq!(fmt_utc(t, "[Today is] dddd"), "Today is Friday");
        assert_eq!(fmt_utc(t, "[YYYY MM]"), "YYYY MM");
        assert_eq!(fmt_utc(t, "[]YYYY"), "2025");
        assert_eq!(fmt_utc(t, "YYYY [unterminated MM"), "2025 unterminated MM");
        assert_eq!(fmt_utc(t, "Y S SS d x é 日本 %Y"), "Y S SS d x é 日本 %Y");
        assert_eq!(fmt_utc(t, "]"), "]");
        assert_eq!(fmt_utc(t, ""), "");
        // Greedy: MMMMM is MMMM followed by M.
        assert_eq!(fmt_utc(t, "MMMMM"), "March3");
        assert_eq!(fmt_utc(t, "YYYYY"), "2025Y");
        assert_eq!(fmt_utc(t, "SSSS"), "000S");
    }

    #[test]
    fn offsets_and_zones() {
        let t = at("2025-07-01T12:00:00Z");
        let kolkata: Tz = "Asia/Kolkata".parse().unwrap();
        assert_eq!(format_time(&t.with_timezone(&kolkata), "HH:mm Z ZZ"), "17:30 +05:30 +0530");
        let ny: Tz = "America/New_York".parse().unwrap();
        assert_eq!(format_time(&t.with_timezone(&ny), "HH:mm Z"), "08:00 -04:00"); // EDT
        let winter = at("2025-01-15T12:00:00Z");
        assert_eq!(format_time(&winter.with_timezone(&ny), "HH:mm ZZ"), "07:00 -0500"); // EST
        let nepal: Tz = "Asia/Kathmandu".parse().unwrap();
        assert_eq!(format_time(&t.with_timezone(&nepal), "Z"), "+05:45");
        let odd = FixedOffset::west_opt(3 * 3600 + 30 * 60).unwrap();
        assert_eq!(format_time(&t.with_timezone(&odd), "Z|ZZ"), "-03:30|-0330");
        // Date rolls over with the zone.
        let tokyo: Tz = "Asia/Tokyo".parse().unwrap();
        let late = at("2024-12-31T20:00:00Z");
        assert_eq!(format_time(&late.with_timezone(&tokyo), "YYYY-MM-DD dddd"), "2025-01-01 Wednesday");
    }

    #[test]
    fn years_outside_four_digits() {
        let d = Utc.with_ymd_and_hms(5, 1, 2, 3, 4, 5).unwrap();
        assert_eq!(format_time(&d, "YYYY YY"), "0005 05");
        let d = Utc.with_ymd_and_hms(12345, 1, 2, 3, 4, 5).unwrap();
        assert_eq!(format_time(&d, "YYYY YY"), "12345 45");
    }

    #[test]
    fn all_months_and_weekdays() {
        for m in 1..=12u32 {
            let d = Utc.with_ymd_and_hms(2025, m, 1, 0, 0, 0).unwrap();
            assert_eq!(format_time(&d, "MMMM"), MONTHS[(m - 1) as usize]);
            assert_eq!(format_time(&d, "MMM").len(), 3);
        }
        // 2025-03-03 is a Monday.
        for i in 0..7u32 {
            let d = Utc.with_ymd_and_hms(2025, 3, 3 + i, 0, 0, 0).unwrap();
            assert_eq!(format_time(&d, "dddd"), WEEKDAYS[i as usize]);
            assert_eq!(format_time(&d, "ddd"), &WEEKDAYS[i as usize][..3]);
        }
    }

    fn fixed_now() -> DateTime<Utc> {
        at("2025-03-07T04:05:06.789Z")
    }

    #[tokio::test]
    async fn call_result_shape() {
        let app = TimeApp::with_clock(fixed_now);
        let r = app
            .call(TOOL_GET_CURRENT_TIME, json!({"format": "YYYY-MM-DD HH:mm", "timezone": "Europe/Paris"}))
            .await
            .unwrap();
        assert_eq!(
            r,
            json!({
                "content": [{"type": "text", "text": "2025-03-07 05:05"}],
                "structuredContent": {
                    "time": "2025-03-07 05:05",
                    "timezone": "Europe/Paris",
                    "iso8601": "2025-03-07T05:05:06.789+01:00",
                }
            })
        );
        let r = app.call(TOOL_GET_CURRENT_TIME, json!({"format": "HH:mm"})).await.unwrap();
        assert_eq!(r["structuredContent"]["timezone"], "UTC");
        assert_eq!(r["structuredContent"]["iso8601"], "2025-03-07T04:05:06.789+00:00");
        assert!(r.get("isError").is_none());
    }

    #[tokio::test]
    async fn bad_arguments_are_tool_errors() {
        let app = TimeApp::with_clock(fixed_now);
        let r = app.call(TOOL_GET_CURRENT_TIME, json!({"format": "HH", "timezone": "Mars/Olympus"})).await.unwrap();
        assert_eq!(r["isError"], true);
        let msg = r["content"][0]["text"].as_str().unwrap();
        assert!(msg.contains("Mars/Olympus"), "{msg}");
        for args in [
            json!({}),
            json!(null),
            json!([1]),
            json!({"format": 3}),
            json!({"format": "HH", "timezone": 5}),
            json!({"format": "H".repeat(MAX_FORMAT_LEN + 1)}),
        ] {
            let r = app.call(TOOL_GET_CURRENT_TIME, args.clone()).await.unwrap();
            assert_eq!(r["isError"], true, "{args}");
        }
    }

    #[tokio::test]
    async fn unknown_tool() {
        let app = TimeApp::new();
        assert_eq!(app.call("nope", json!({})).await, Err(BuiltinError::UnknownTool("nope".into())));
    }

    #[test]
    fn tool_definition() {
        let tools = TimeApp::new().tools();
        assert_eq!(tools.len(), 1);
        let t = &tools[0];
        assert_eq!(t["name"], TOOL_GET_CURRENT_TIME);
        assert_eq!(t["inputSchema"]["type"], "object");
        assert_eq!(t["outputSchema"]["type"], "object");
        assert_eq!(t["annotations"]["readOnlyHint"], true);
        let desc = t["description"].as_str().unwrap();
        for token in TOKENS {
            assert!(desc.contains(token), "description documents {token}");
        }
    }
}
