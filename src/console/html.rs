//! The console's HTML: the frame (navigation, `<main>`), forms and tables, and the stylesheet and
//! script served from the binary. Every value from the API goes through [`escape`].

use super::{Ctx, PATH};
pub(super) use crate::identity::signin::escape;
use crate::identity::signin::Page;
use serde_json::Value;

const CSS: &str = include_str!("static/console.css");
const JS: &str = include_str!("static/console.js");
/// The console's icon: a "t" on the accent colour, as a `data:` URL (the CSP's `img-src`
/// allows `data:`), so that a browser asks for no `/favicon.ico` (a 404 is an error in its console).
const ICON: &str = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E\
%3Crect width='16' height='16' rx='3' fill='%230b5cad'/%3E%3Cpath d='M5 4.5h6M8 4.5v7' stroke='white' \
stroke-width='2.2' stroke-linecap='round'/%3E%3C/svg%3E";
/// The static files' cache policy: their URL names their content, so a URL's answer never changes.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The static files' names: `console.<hash>.css` and `console.<hash>.js`, the hash the first 16
/// hex digits of the content's SHA-256 (a changed file is a new URL).
fn names() -> &'static (String, String) {
    static NAMES: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let hash = |content: &str| crate::base::secrets::hash_key(content)[..16].to_string();
        (format!("console.{}.css", hash(CSS)), format!("console.{}.js", hash(JS)))
    })
}

/// The pages of the navigation: path below the console, label.
const NAV: [(&str, &str); 13] = [
    ("/gateways", "Gateways"),
    ("/apps", "Apps"),
    ("/keys", "Keys"),
    ("/service-accounts", "Service accounts"),
    ("/sessions", "Sessions"),
    ("/logs", "Logs"),
    ("/analytics", "Analytics"),
    ("/webhooks", "Webhooks"),
    ("/alerts", "Alerts"),
    ("/ip-allowlist", "IP allowlist"),
    ("/mfa", "MFA"),
    ("/team", "Team"),
    ("/tool-changes", "Tool changes"),
];

fn head(prefix: &str, title: &str) -> String {
    head_going(prefix, title, None)
}

/// The `<head>`; `to`: a page that goes on to that URL by itself (`<meta http-equiv="refresh">`).
/// The icon ([`ICON`], a `data:` URL) keeps browsers from asking for `/favicon.ico`, a 404 (an error in
/// the browser's console on every first page).
fn head_going(prefix: &str, title: &str, to: Option<&str>) -> String {
    let refresh =
        to.map(|to| format!("<meta http-equiv=\"refresh\" content=\"0; url={}\">", escape(to))).unwrap_or_default();
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}<title>{} - toolgate console</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"{ICON}\">\
         <link rel=\"stylesheet\" href=\"{}{PATH}/static/{}\">\
         <script src=\"{}{PATH}/static/{}\" defer></script></head>",
        escape(title),
        escape(prefix),
        names().0,
        escape(prefix),
        names().1
    )
}

/// A page without the navigation (no signed-in user to show it to).
pub(super) fn bare(title: &str, text: &str) -> String {
    format!(
        "{}<body><main><h1>{}</h1><p class=\"error\" role=\"alert\">{}</p></main></body></html>",
        head("/auth", title),
        escape(title),
        escape(text)
    )
}

/// A page of the console: the header with the user and sign-out, the navigation (`current`
/// marked), the notice left by the last POST, and `body` in `<main>`.
pub(super) fn frame(ctx: &Ctx<'_>, title: &str, current: &str, body: &str) -> String {
    frame_to(ctx, title, current, body, None)
}

/// [`frame`] for a page that goes on to `to` by itself (the way to an OAuth authorization).
pub(super) fn frame_going(ctx: &Ctx<'_>, title: &str, current: &str, body: &str, to: &str) -> String {
    frame_to(ctx, title, current, body, Some(to))
}

fn frame_to(ctx: &Ctx<'_>, title: &str, current: &str, body: &str, to: Option<&str>) -> String {
    let mut out = String::with_capacity(body.len() + 3072);
    out.push_str(&head_going(&ctx.prefix, title, to));
    out.push_str("<body><a class=\"skip\" href=\"#main\">Skip to content</a><header><a class=\"brand\" href=\"");
    out.push_str(&ctx.href(""));
    out.push_str("\">toolgate</a><span class=\"who\">");
    out.push_str(&escape(&ctx.user.email));
    out.push_str(" · ");
    out.push_str(&escape(ctx.principal.role.as_str()));
    out.push_str("</span><a href=\"");
    out.push_str(&escape(&format!("{}/", ctx.prefix)));
    out.push_str("\">Account</a></header><nav aria-label=\"Console\"><ul>");
    for (to, label) in NAV {
        let here = if to == current { " aria-current=\"page\"" } else { "" };
        out.push_str(&format!("<li><a href=\"{}\"{here}>{label}</a></li>", ctx.href(to)));
    }
    out.push_str("</ul></nav><main id=\"main\"><h1>");
    out.push_str(&escape(title));
    out.push_str("</h1>");
    if let Some(n) = &ctx.notice {
        out.push_str(&format!("<p class=\"notice\" role=\"status\">{}</p>", escape(n)));
    }
    out.push_str(body);
    out.push_str("</main></body></html>");
    out
}

/// The stylesheet or the script, from the binary, by its content-addressed name (kept a year).
pub(super) fn asset(file: &str) -> Page {
    let (css, js) = names();
    let (body, content_type) = match file {
        f if f == css => (CSS, "text/css; charset=utf-8"),
        f if f == js => (JS, "text/javascript; charset=utf-8"),
        _ => return Page::of(404, "text/plain", "not found"),
    };
    Page::of(200, content_type, body).header(http::header::CACHE_CONTROL, IMMUTABLE)
}

/// A POST form's opening tag and its CSRF field; `class` names the form for the stylesheet.
pub(super) fn form_open(ctx: &Ctx<'_>, to: &str, class: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{}\" class=\"{class}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        ctx.href(to),
        escape(&ctx.csrf)
    )
}

/// A labelled text input.
pub(super) fn input(label: &str, name: &str, value: &str, extra: &str) -> String {
    format!("<label>{label} <input name=\"{name}\" value=\"{}\" {extra}></label>", escape(value))
}

/// The field of a protected action: the current authenticator code (or a backup code), sent to
/// the API as `X-MFA-Token`.
pub(super) fn mfa_field() -> String {
    "<label>MFA code <input name=\"mfa_code\" inputmode=\"numeric\" autocomplete=\"one-time-code\" \
     placeholder=\"if MFA is on\"></label>"
        .to_string()
}

/// A JSON value as text: strings as they are, nothing for null, others as JSON.
pub(super) fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A table of `rows` with `columns` (header, JSON field); `link` makes the first column a link
/// to a record's page (`/gateways/` + its `id`).
pub(super) fn table(caption: &str, rows: &[Value], columns: &[(&str, &str)], link: Option<(&Ctx<'_>, &str)>) -> String {
    if rows.is_empty() {
        return format!("<p class=\"empty\">No {}.</p>", escape(&caption.to_lowercase()));
    }
    let mut out = String::with_capacity(rows.len() * 200 + 256);
    out.push_str(&format!("<div class=\"scroll\"><table><caption>{}</caption><thead><tr>", escape(caption)));
    for (header, _) in columns {
        out.push_str(&format!("<th scope=\"col\">{header}</th>"));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for (i, (_, key)) in columns.iter().enumerate() {
            let value = escape(&text(&row[*key]));
            let class = cell_class(key);
            match link {
                Some((ctx, base)) if i == 0 => {
                    let id = text(&row["id"]);
                    let href = ctx.href(&format!("{base}{}", super::seg(&id)));
                    out.push_str(&format!("<td{class}><a href=\"{href}\">{value}</a></td>"));
                }
                _ => out.push_str(&format!("<td{class}>{value}</td>")),
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

/// The class of a table cell by its field: an id, a time or a one-word state is never broken
/// inside (`id`: `white-space: nowrap`; a wide table scrolls instead), free text may break
/// anywhere (`text`), the rest wraps between words only.
fn cell_class(key: &str) -> &'static str {
    const WORDS: [&str; 5] = ["status", "state", "owner", "kind", "method"];
    const FREE: [&str; 5] = ["description", "diff", "error", "message", "scope_list"];
    if key == "id" || key.ends_with("_id") || key.ends_with("_at") || WORDS.contains(&key) {
        " class=\"id\""
    } else if FREE.contains(&key) {
        " class=\"text\""
    } else {
        ""
    }
}

/// Previous and next links from the API's `pagination` object; `query` is the page's other
/// parameters, already encoded.
pub(super) fn pager(ctx: &Ctx<'_>, to: &str, pagination: &Value, query: &str) -> String {
    let page = pagination["page"].as_u64().unwrap_or(1);
    let link = |p: u64, label: &str, rel: &str| {
        format!("<a rel=\"{rel}\" href=\"{}\">{label}</a>", ctx.href(&format!("{to}?{query}&page={p}")))
    };
    let mut out = format!(
        "<nav class=\"pager\" aria-label=\"Pages\"><span>Page {page} of {} ({} in all)</span>",
        pagination["pages"].as_u64().unwrap_or(1),
        pagination["total"].as_u64().unwrap_or(0)
    );
    if pagination["has_prev"].as_bool() == Some(true) {
        out.push_str(&link(page - 1, "Previous", "prev"));
    }
    if pagination["has_next"].as_bool() == Some(true) {
        out.push_str(&link(page + 1, "Next", "next"));
    }
    out.push_str("</nav>");
    out
}

/// A `<select>` of `options` (value, label) with `chosen` selected.
pub(super) fn select(label: &str, name: &str, options: &[(&str, &str)], chosen: Option<&str>) -> String {
    let mut out = format!("<label>{label} <select name=\"{name}\">");
    for (value, text) in options {
        let sel = if Some(*value) == chosen { " selected" } else { "" };
        out.push_str(&format!("<option value=\"{}\"{sel}>{}</option>", escape(value), escape(text)));
    }
    out.push_str("</select></label>");
    out
}

/// A secret shown once, with a copy button.
pub(super) fn secret(label: &str, value: &str) -> String {
    format!(
        "<div class=\"secret\" role=\"alert\"><p><strong>{label}</strong>: shown this once; copy it now.</p>\
         {}</div>",
        copyable("secret", value)
    )
}

/// A value in a `<code>` block with a copy button (the script copies the element it names).
pub(super) fn copyable(id: &str, value: &str) -> String {
    format!(
        "<div class=\"copy\"><pre><code id=\"{id}\">{}</code></pre>\
         <button type=\"button\" class=\"copy-button\" data-copy=\"{id}\">Copy</button></div>",
        escape(value)
    )
}

/// One small form with a button (and the MFA code when `mfa`), posting to `to`. A row's button
/// (`of` its record's id) is named for a screen reader with the record: "End ses_1", not "End".
pub(super) fn button(ctx: &Ctx<'_>, to: &str, (label, of): (&str, &str), mfa: bool, danger: bool) -> String {
    let named = if of.is_empty() { String::new() } else { format!(" aria-label=\"{label} {}\"", escape(of)) };
    format!(
        "{}{}<button type=\"submit\"{}{named}>{label}</button></form>",
        form_open(ctx, to, "inline"),
        if mfa { mfa_field() } else { String::new() },
        if danger { " class=\"danger\"" } else { "" }
    )
}

/// A table whose last column holds a form per row (`action` of the row's id), shown when
/// `writable`.
pub(super) fn table_with(
    caption: &str,
    items: &[Value],
    columns: &[(&str, &str)],
    writable: bool,
    action: impl Fn(&str) -> String,
) -> String {
    if !writable {
        return table(caption, items, columns, None);
    }
    let mut items = items.to_vec();
    for item in &mut items {
        item["_action"] = Value::String(String::new());
    }
    let mut cols = columns.to_vec();
    cols.push(("", "_action"));
    let table = table(caption, &items, &cols, None);
    // The action cells are empty in the table; each is filled with its row's form in order.
    let mut out = String::with_capacity(table.len() + items.len() * 400);
    let mut rest = table.as_str();
    for item in &items {
        let Some(at) = rest.find("<td></td></tr>") else { break };
        out.push_str(&rest[..at]);
        out.push_str(&format!("<td>{}</td></tr>", action(&text(&item["id"]))));
        rest = &rest[at + "<td></td></tr>".len()..];
    }
    out.push_str(rest);
    out
}
