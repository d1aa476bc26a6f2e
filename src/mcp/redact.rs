//! Secrets redacted before they reach a model (`configuration.redact`): the built-in detector
//! set `secrets` finds credentials that have a fixed shape, and each match is replaced by
//! `[redacted:<kind>]`. A model that reads a key can repeat it, and a prompt injected elsewhere
//! can ask it to; a shape this precise is rarely anything else.
//!
//! The patterns are one `RegexSet` compiled once per process (`regex`: linear time, no
//! backtracking, so an app cannot make a scan slow), run first over the whole JSON text of an
//! answer: an answer with no match is passed on as it came. Only a string the set matches is
//! rewritten, with the patterns that matched. The detectors (`docs/governance.md` lists them):
//!
//! | kind | shape |
//! |---|---|
//! | `private_key` | a PEM block `-----BEGIN ... PRIVATE KEY-----` to its `END` line |
//! | `aws_access_key_id` | `AKIA`, `ASIA`, `ABIA` or `ACCA` and 16 capitals or digits |
//! | `github_token` | `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` and 36 or more alphanumerics; `github_pat_` |
//! | `gitlab_token` | `glpat-` and 20 characters |
//! | `slack_token` | `xoxa-`, `xoxb-`, `xoxp-`, `xoxo-`, `xoxs-`, `xoxr-` and more |
//! | `stripe_key` | `sk_live_`, `sk_test_`, `rk_live_`, `rk_test_` and 16 or more alphanumerics |
//! | `google_api_key` | `AIza` and 35 characters |
//! | `jwt` | three base64url parts, the first two JSON objects (`eyJ`) |
//! | `toolgate_key` | toolgate's API keys (`ag_` and 40 alphanumerics) and OAuth tokens (`tga_`, `tgr_`) |

use regex::{Regex, RegexSet};
use std::borrow::Cow;
use std::sync::OnceLock;

/// The detector sets a gateway may name in `configuration.redact.detectors`.
pub(crate) const DETECTOR_SETS: [&str; 1] = ["secrets"];

/// Each detector: its kind (the `[redacted:<kind>]` text and the metric label) and pattern.
/// Word boundaries are ASCII ones (`(?-u:\b)`): every secret is ASCII, and a Unicode boundary
/// makes the regex engine leave its DFA on any non-ASCII text, 60 times slower (1 KiB of
/// multilingual text: 166 against 10 us, `benches/content.rs`).
const DETECTORS: [(&str, &str); 9] = [
    ("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?s:.*?)-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----"),
    ("aws_access_key_id", r"(?-u:\b)(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}(?-u:\b)"),
    ("github_token", r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})(?-u:\b)"),
    ("gitlab_token", r"(?-u:\b)glpat-[A-Za-z0-9_-]{20,}"),
    ("slack_token", r"(?-u:\b)xox[abposr]-[0-9A-Za-z]{8,}(?:-[0-9A-Za-z]+)+"),
    ("stripe_key", r"(?-u:\b)[sr]k_(?:live|test)_[0-9A-Za-z]{16,}(?-u:\b)"),
    ("google_api_key", r"(?-u:\b)AIza[0-9A-Za-z_-]{35}"),
    ("jwt", r"(?-u:\b)eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}"),
    ("toolgate_key", r"(?-u:\b)(?:ag_[A-Za-z0-9]{40}(?-u:\b)|tg[ar]_[A-Za-z0-9_]+\.[A-Za-z0-9_-]{16,})"),
];

struct Compiled {
    set: RegexSet,
    each: Vec<Regex>,
}

fn compiled() -> &'static Compiled {
    static C: OnceLock<Compiled> = OnceLock::new();
    C.get_or_init(|| Compiled {
        set: RegexSet::new(DETECTORS.iter().map(|(_, p)| *p)).expect("the detectors compile"),
        each: DETECTORS.iter().map(|(_, p)| Regex::new(p).expect("the detectors compile")).collect(),
    })
}

/// Whether any detector matches anywhere in `text` (the whole answer's JSON text): one pass.
pub(crate) fn any(text: &str) -> bool {
    compiled().set.is_match(text)
}

/// `s` with every secret replaced by `[redacted:<kind>]`, and the kinds found, each with its
/// count. Borrowed when there is none.
pub(crate) fn redact(s: &str) -> (Cow<'_, str>, Vec<(&'static str, usize)>) {
    let c = compiled();
    let matched = c.set.matches(s);
    if !matched.matched_any() {
        return (Cow::Borrowed(s), Vec::new());
    }
    let mut out = s.to_string();
    let mut found = Vec::new();
    for i in matched.iter() {
        let (kind, re) = (DETECTORS[i].0, &c.each[i]);
        let n = re.find_iter(&out).count();
        if n == 0 {
            // An earlier kind's replacement took this match (a JWT inside a PEM block).
            continue;
        }
        out = re.replace_all(&out, format!("[redacted:{kind}]").as_str()).into_owned();
        found.push((kind, n));
    }
    (Cow::Owned(out), found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds_in(s: &str) -> Vec<&'static str> {
        redact(s).1.into_iter().map(|(k, _)| k).collect()
    }

    /// Each detector finds its kind in a sentence, and only it is replaced.
    #[test]
    fn each_detector_finds_its_kind() {
        let pem =
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo\n-----END RSA PRIVATE KEY-----";
        let cases = [
            ("private_key", pem.to_string()),
            ("aws_access_key_id", "AKIAIOSFODNN7EXAMPLE".to_string()),
            ("github_token", format!("ghp_{}", "a1B2c3D4e5".repeat(4))),
            ("github_token", format!("github_pat_11ABCDEFG0{}", "x".repeat(60))),
            ("gitlab_token", "glpat-xYz123AbCdEfGhIjKlMn".to_string()),
            ("slack_token", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx".to_string()),
            ("stripe_key", format!("sk_live_{}", "4eC39HqLyjWDarjtT1zdp7dc")),
            ("google_api_key", format!("AIza{}", "SyD-abcdefghijklmnopqrstuvwxyz01234")),
            (
                "jwt",
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
                    .to_string(),
            ),
            ("toolgate_key", format!("ag_{}", "Ab3".repeat(13) + "x")),
            ("toolgate_key", "tga_grt_0123456789abcdef.AbCdEfGhIjKlMnOpQrStUv".to_string()),
        ];
        for (kind, secret) in cases {
            let text = format!("the value is {secret} (keep it safe)");
            let (out, found) = redact(&text);
            assert_eq!(found, vec![(kind, 1)], "{kind}: {text}");
            assert_eq!(out, format!("the value is [redacted:{kind}] (keep it safe)"), "{kind}");
            assert!(any(&text), "{kind}: the whole-text check sees it too");
        }
    }

    /// What looks alike but is no secret passes byte for byte: a commit hash, a UUID, base64
    /// image data, prose naming the prefixes, a key id too short.
    #[test]
    fn look_alikes_are_left_alone() {
        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
        let cases = [
            "commit a358734c0ffee5d1e2b3c4a5f60718293a4b5c6d",
            "id 123e4567-e89b-12d3-a456-426614174000",
            png,
            "data:image/png;base64,/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAYEBQYFBAYGBQYHBwYIChAKCgkJChQODw0QFxQYGBcUFhYaHSUfGhsjHBYWICwgIyYnKSopGR8tMC0oMCUoKSj/",
            "GitHub tokens start with ghp_ and AWS key ids with AKIA",
            "AKIA1234 is too short, sk_live_short too",
            "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
            "the token eyJhbGciOi is only a header",
            "ag_short and tga_ alone",
        ];
        for text in cases {
            assert_eq!(kinds_in(text), Vec::<&str>::new(), "{text}");
            assert!(matches!(redact(text).0, Cow::Borrowed(_)), "{text}");
            assert!(!any(text), "{text}");
        }
    }

    #[test]
    fn several_secrets_each_counted() {
        let text = "AKIAIOSFODNN7EXAMPLE and AKIAIOSFODNN7EXAMPLF, then xoxp-12345678901-abc-def";
        let (out, found) = redact(text);
        assert_eq!(found, vec![("aws_access_key_id", 2), ("slack_token", 1)]);
        assert_eq!(out, "[redacted:aws_access_key_id] and [redacted:aws_access_key_id], then [redacted:slack_token]");
    }
}
