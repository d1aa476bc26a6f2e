//! The CSRF defence of the identity service's forms and the console's (docs/identity.md "CSRF").
//!
//! A token is `nonce.mac`: a fresh random nonce and HMAC-SHA256 over what the token is bound
//! to, under a key derived from the master key (so every instance sharing the key verifies
//! what another issued). A form's token is bound either to the web session whose pages carry
//! it (the SHA-256 of the session's token) or, before there is a session (the sign-in form and
//! its MFA step), to "no session yet". The cookie holds the same token (`SameSite=Strict`), and
//! a POST is accepted only when its field equals the cookie and the MAC verifies for the
//! request's own binding: a token the client made up (cookie and field alike) fails the MAC,
//! and one issued to another session (an attacker's own) fails the binding. This is the
//! signed, session-bound double submit: a plain double submit accepted any value a client put
//! in both places, so whoever could plant a cookie (a sibling subdomain, a plain-HTTP answer)
//! could forge every form.
//!
//! Browsers also say where a POST came from: `Sec-Fetch-Site` other than `same-origin` (or
//! `none`, typed by the user) and an `Origin` that is not this server's (its `public_url`, or
//! the `Host` it was asked for) are refused before the token is read. A client that sends
//! neither (an old browser, curl) is judged by the token alone. `Origin: null` says nothing:
//! browsers send it for every POST from a page with `Referrer-Policy: no-referrer`, which these
//! pages are, so it counts as absent (a browser that sends it also sends `Sec-Fetch-Site`).
//!
//! Where TLS is on (`server.tls`), the session and CSRF cookies are `__Host-` prefixed (hence
//! `Secure`, `Path=/` and no `Domain`): a browser accepts such a cookie only from this very
//! origin over HTTPS, so no other host of the domain can set one.

use crate::base::secrets;
use crate::config::Config;
use crate::data::state::State;
use crate::edge::error::ApiError;
use crate::edge::exchange::Exchange;

/// The cookies' names without TLS, and with it (`__Host-`).
const CSRF: [&str; 2] = ["toolgate_csrf", "__Host-toolgate_csrf"];
const SESSION: [&str; 2] = ["toolgate_session", "__Host-toolgate_session"];

/// What a token is bound to.
#[derive(Clone, Copy)]
pub(crate) enum Binding<'a> {
    /// The sign-in form and its MFA step: no session yet.
    PreSession,
    /// The web session whose token (the cookie's value) is this.
    Session(&'a str),
}

fn tls(config: &Config) -> bool {
    config.server.tls.is_some()
}

/// The CSRF cookie's name under `config`.
pub(crate) fn csrf_cookie_name(config: &Config) -> &'static str {
    CSRF[usize::from(tls(config))]
}

/// The session cookie's name under `config`.
pub(crate) fn session_cookie_name(config: &Config) -> &'static str {
    SESSION[usize::from(tls(config))]
}

/// The `Path` of the CSRF cookie: the identity service's prefix, or `/` for a `__Host-` one.
fn csrf_path(config: &Config) -> &str {
    if tls(config) {
        "/"
    } else {
        &config.web.path
    }
}

/// The `Set-Cookie` value carrying `token`.
pub(crate) fn cookie(config: &Config, token: &str) -> String {
    format!("{}={token}; Path={}; HttpOnly; Secure; SameSite=Strict", csrf_cookie_name(config), csrf_path(config))
}

/// The MAC of `nonce` under `binding` (hex).
fn mac(state: &State, binding: Binding<'_>, nonce: &str) -> String {
    let key = state.sealer.derive(b"toolgate web form tokens");
    let bound = match binding {
        Binding::PreSession => "pre-session".to_string(),
        Binding::Session(token) => format!("session:{}", secrets::hash_key(token)),
    };
    hex::encode(secrets::hmac_sha256(&key, format!("{bound}\n{nonce}").as_bytes()))
}

/// A fresh token bound to `binding`.
pub(crate) fn issue(state: &State, binding: Binding<'_>) -> String {
    let nonce = secrets::new_session_id();
    let mac = mac(state, binding, &nonce);
    format!("{nonce}.{mac}")
}

/// Whether `token` was issued by this server (any instance with its master key) for `binding`.
pub(crate) fn valid(state: &State, binding: Binding<'_>, token: &str) -> bool {
    let Some((nonce, sent)) = token.split_once('.') else { return false };
    !nonce.is_empty() && secrets::hashes_equal(sent, &mac(state, binding, nonce))
}

/// The request's CSRF cookie when it is valid for `binding` (a page's forms then keep it), or
/// `None` (the page issues a fresh one).
pub(crate) fn kept<'a>(state: &State, ex: &'a Exchange<'_>, binding: Binding<'_>) -> Option<&'a str> {
    super::cookie(ex, csrf_cookie_name(&state.config())).filter(|t| valid(state, binding, t))
}

/// Refuses (403) a form POST that a browser says came from another site, or whose `csrf` field
/// `sent` is not the request's cookie or was not issued for `binding`.
pub(crate) fn check(state: &State, ex: &Exchange<'_>, sent: &str, binding: Binding<'_>) -> Result<(), ApiError> {
    from_this_site(ex, &state.config().server.public_url)?;
    let cookie = super::cookie(ex, csrf_cookie_name(&state.config())).unwrap_or("");
    if sent.is_empty() || !secrets::hashes_equal(sent, cookie) || !valid(state, binding, sent) {
        return Err(ApiError::Forbidden("the form's CSRF token is missing or does not match: reload the page".into()));
    }
    Ok(())
}

/// Refused when the browser says the request came from elsewhere: `Sec-Fetch-Site` other than
/// `same-origin` or `none`, or an `Origin` that is neither `public_url`'s nor the `Host` asked.
fn from_this_site(ex: &Exchange<'_>, public_url: &str) -> Result<(), ApiError> {
    if let Some(site) = ex.header("sec-fetch-site") {
        if !matches!(site, "same-origin" | "none") {
            return Err(ApiError::Forbidden(format!("a form sent from another site ({site}) is refused")));
        }
    }
    match ex.header("origin") {
        None | Some("null") => Ok(()),
        Some(origin) if same_origin(origin, public_url, host(ex)) => Ok(()),
        Some(origin) => Err(ApiError::Forbidden(format!("a form sent from another origin ({origin}) is refused"))),
    }
}

/// The host (and port) the request asked for: `Host`, or HTTP/2's `:authority`.
fn host<'a>(ex: &'a Exchange<'_>) -> Option<&'a str> {
    ex.header("host").or_else(|| ex.request().uri.authority().map(|a| a.as_str()))
}

/// Whether `origin` (an `Origin` header) is `public_url`'s origin or names the requested host.
fn same_origin(origin: &str, public_url: &str, host: Option<&str>) -> bool {
    let Ok(sent) = url::Url::parse(origin) else { return false };
    if !sent.has_host() {
        return false; // `null`, and anything without a host
    }
    let ours = url::Url::parse(public_url).map(|u| u.origin());
    if ours.is_ok_and(|o| o == sent.origin()) {
        return true;
    }
    let authority = origin.split_once("://").map_or("", |(_, rest)| rest.trim_end_matches('/'));
    host.is_some_and(|h| h.eq_ignore_ascii_case(authority))
}

#[cfg(test)]
mod tests {
    use super::same_origin;

    #[test]
    fn an_origin_is_the_public_urls_or_the_requested_hosts() {
        let public = "https://tg.example";
        assert!(same_origin("https://tg.example", public, None));
        assert!(same_origin("http://127.0.0.1:8080", public, Some("127.0.0.1:8080")));
        assert!(same_origin("http://LOCALHOST:8080", public, Some("localhost:8080")));
        for other in ["https://evil.example", "null", "https://tg.example.evil", "http://tg.example", "", "tg.example"]
        {
            assert!(!same_origin(other, public, Some("127.0.0.1:8080")), "{other}");
        }
    }
}
