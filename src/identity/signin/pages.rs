//! The identity service's pages: minimal HTML, every value escaped.

use super::WebSession;
use crate::data::model::User;

/// `s` safe in HTML text and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The identity pages' stylesheet: the console's look (its type, colours, fields, buttons and
/// focus ring: `src/console/static/console.css`) on a narrow column, inline as these pages'
/// CSP allows, so that signing in and the account read as the same product as the console.
const LOOK: &str = "body{margin:0;font:15px/1.45 system-ui,sans-serif;color:#1b1f24;background:#f6f8fa}\
header{padding:.6em 1em;border-bottom:1px solid #d0d7de;background:#fff}header b{font-weight:700}\
main{max-width:30em;margin:2.5em auto;padding:1.2em 1.5em;background:#fff;border:1px solid #d0d7de;border-radius:6px}\
h1{font-size:1.5em;margin-top:0}a{color:#0b5cad}label{display:flex;flex-direction:column;gap:.2em;margin:.8em 0;\
font-size:.9em;color:#57606a}input,select,button{font:inherit;padding:.35em .5em;border:1px solid #d0d7de;border-radius:4px}\
input{width:100%;box-sizing:border-box;color:#1b1f24}button{white-space:nowrap;background:#0b5cad;color:#fff;\
border-color:#0b5cad;cursor:pointer}:focus-visible{outline:3px solid #f0b400;outline-offset:1px}\
.error{color:#b3261e}time,code{white-space:nowrap}table{display:block;overflow-x:auto;border-collapse:collapse}th,td{text-align:left;\
padding:.35em .6em;border-bottom:1px solid #d0d7de}@media (max-width:500px){main{margin:0;border:0;border-radius:0}}";

/// A page of the identity service (the sign-in's and the authorization server's): `body` in
/// the frame, under `title`.
pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} - toolgate</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <style>{LOOK}</style></head><body><header><b>toolgate</b></header><main><h1>{}</h1>{body}</main></body></html>",
        escape(title),
        escape(title)
    )
}

fn error_line(error: Option<&str>) -> String {
    error.map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>", escape(e))).unwrap_or_default()
}

pub(crate) fn message(title: &str, text: &str) -> String {
    page(title, &format!("<p>{}</p>", escape(text)))
}

pub(crate) fn sign_in(
    prefix: &str,
    csrf: &str,
    next: Option<&str>,
    providers: &[(String, String)],
    error: Option<&str>,
) -> String {
    let next_query =
        next.map(|n| format!("?next={}", url::form_urlencoded::byte_serialize(n.as_bytes()).collect::<String>()));
    let links: String = providers
        .iter()
        .map(|(path, name)| {
            let href = format!("{prefix}{path}{}", next_query.as_deref().unwrap_or(""));
            format!("<p><a class=\"provider\" href=\"{}\">Sign in with {}</a></p>", escape(&href), escape(name))
        })
        .collect();
    page(
        "Sign in",
        &format!(
            "{}{links}<form method=\"post\" action=\"{}/signin\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <input type=\"hidden\" name=\"next\" value=\"{}\">\
             <label>E-mail <input type=\"email\" name=\"email\" autocomplete=\"username\" required></label>\
             <label>Password <input type=\"password\" name=\"password\" autocomplete=\"current-password\" required></label>\
             <button type=\"submit\">Sign in</button></form>",
            error_line(error),
            escape(prefix),
            escape(csrf),
            escape(next.unwrap_or(""))
        ),
    )
}

/// The second step of a sign-in; `prompt` says where the code comes from (the authenticator, or
/// where a code was just sent).
pub(crate) fn code(
    prefix: &str,
    csrf: &str,
    challenge: &str,
    next: &str,
    prompt: Option<&str>,
    error: Option<&str>,
) -> String {
    page(
        "Two-step verification",
        &format!(
            "{}{}<form method=\"post\" action=\"{}/signin/mfa\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <input type=\"hidden\" name=\"challenge_id\" value=\"{}\"><input type=\"hidden\" name=\"next\" value=\"{}\">\
             <label>Code (authenticator app, e-mail or text message), or a backup code <input name=\"code\" \
             autocomplete=\"one-time-code\" required></label><button type=\"submit\">Verify</button></form>",
            error_line(error),
            prompt.map(|p| format!("<p>{}</p>", escape(p))).unwrap_or_default(),
            escape(prefix),
            escape(csrf),
            escape(challenge),
            escape(next)
        ),
    )
}

pub(crate) fn account(prefix: &str, csrf: &str, user: &User, current: &WebSession, sessions: &[WebSession]) -> String {
    let rows: String = sessions
        .iter()
        .map(|s| {
            format!(
                "<li data-session=\"{}\"><time datetime=\"{}\">{}</time> from {} ({}){}</li>",
                escape(&s.id),
                escape(&s.created_at.to_rfc3339()),
                escape(&s.created_at.format("%Y-%m-%d %H:%M UTC").to_string()),
                escape(&s.ip),
                escape(&s.user_agent),
                if s.id == current.id { " - this one" } else { "" }
            )
        })
        .collect();
    page(
        "Your account",
        &format!(
            "<p>Signed in as <strong id=\"email\">{}</strong> ({}), <span id=\"role\">{}</span> of \
             <span id=\"organization\">{}</span></p><p><a id=\"console\" href=\"{}/console\">Open the console</a></p>\
             <h2>Sessions</h2><ul>{rows}</ul>\
             <form method=\"post\" action=\"{}/signout\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\">Sign out</button></form>",
            escape(&user.email),
            escape(&user.name),
            escape(&user.role),
            escape(&user.org_id),
            escape(prefix),
            escape(prefix),
            escape(csrf)
        ),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_are_escaped_in_text_and_attributes() {
        let html = super::sign_in(
            "/auth",
            "c",
            Some("/x\"><script>"),
            &[("/signin/acme".into(), "<Acme>".into())],
            Some("<b>"),
        );
        assert!(html.contains("value=\"/x&quot;&gt;&lt;script&gt;\""), "{html}");
        assert!(html.contains("&lt;b&gt;") && !html.contains("<script>"), "{html}");
        assert!(
            html.contains("href=\"/auth/signin/acme?next=%2Fx%22%3E%3Cscript%3E\">Sign in with &lt;Acme&gt;</a>"),
            "{html}"
        );
    }
}
