//! Which representation a request's `Accept` header prefers (RFC 9110, section 12.5.1): the
//! quality of a media type is that of the most specific range matching it.
//!
//! Used where a browser and an API client ask for the same URL: `GET /` sends a browser to the
//! console and keeps the JSON answer for everyone else. A browser asks for `text/html` by name
//! and ranks `*/*` lower; curl, SDKs and scripts send `*/*`, `application/json` or nothing, and
//! a tie goes to JSON.

use http::HeaderMap;

/// Whether the request ranks `text/html` above `application/json`.
pub(crate) fn prefers_html(headers: &HeaderMap) -> bool {
    let html = quality(headers, "text", "html");
    html > 0.0 && html > quality(headers, "application", "json")
}

/// The quality `headers`' `Accept` gives `ty/sub`; 0 when no range matches (also without an
/// `Accept` header: then nothing is preferred over anything).
fn quality(headers: &HeaderMap, ty: &str, sub: &str) -> f32 {
    // (specificity, quality) of the most specific matching range so far.
    let mut best: Option<(u8, f32)> = None;
    let values = headers.get_all(http::header::ACCEPT).into_iter().filter_map(|v| v.to_str().ok());
    for part in values.flat_map(|v| v.split(',')) {
        let mut params = part.split(';');
        let Some((range_type, range_sub)) = params.next().and_then(|r| r.trim().split_once('/')) else { continue };
        let specificity = if range_type.eq_ignore_ascii_case(ty) && range_sub.eq_ignore_ascii_case(sub) {
            2
        } else if range_type.eq_ignore_ascii_case(ty) && range_sub == "*" {
            1
        } else if range_type == "*" && range_sub == "*" {
            0
        } else {
            continue;
        };
        let q = params
            .filter_map(|p| p.trim().strip_prefix("q=").or_else(|| p.trim().strip_prefix("Q=")))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if best.is_none_or(|(s, _)| specificity > s) {
            best = Some((specificity, q));
        }
    }
    best.map_or(0.0, |(_, q)| q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(http::header::ACCEPT, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn browsers_prefer_html_and_api_clients_do_not() {
        // Firefox's and Chrome's navigations.
        assert!(prefers_html(&accept(&["text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"])));
        assert!(prefers_html(&accept(&[
            "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
        ])));
        assert!(prefers_html(&accept(&["application/json;q=0.5", "text/html"])));
        // curl, SDKs, scripts; a tie goes to JSON.
        for api in [&[][..], &["*/*"], &["application/json"], &["text/html, application/json"], &["text/html;q=0"]] {
            assert!(!prefers_html(&accept(api)), "{api:?}");
        }
        assert!(!prefers_html(&accept(&["text/*;q=0.5, application/json"])));
    }
}
