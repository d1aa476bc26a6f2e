//! Connecting an app connected by each user (`connection_scope: user`) from the apps page:
//! every signed-in member connects and disconnects their own connection (Viewers included: the
//! API's `apps:connect_self`), while the organisation's stays an administrator's action. And the
//! link a client is given for a missing connection (`?connect=<app>&elicitation=<id>`,
//! `mcp/elicitations.rs`) lands here: the page checks that the person signed in is the one
//! whose call asked (anyone else is refused and completes nothing), puts that app's connect form
//! first, and once the connect succeeds the client's session is told, so it can retry.

use super::html::{self, escape};
use super::{field, seg, Ctx};
use crate::edge::error::ApiError;
use serde_json::Value;

/// Carries an OAuth connect's "whose" and elicitation across the trip to the app's
/// authorization server, whose redirect URI is fixed (`.../apps/{id}/oauth/back`).
pub(super) const CONNECT_COOKIE: &str = "toolgate_connect";

/// The refusal of another person's link.
const NOT_YOURS: &str = "This link was made for another person's call: only the person whose client asked \
                         can complete it. Nothing was connected and nobody's client is told.";

/// Whose connection a form makes or removes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Whose {
    /// The signed-in member's own, of an app connected by each user.
    Own,
    /// The organisation's (every app connected once; of a per-user app, its `list_as` view).
    Organization,
}

impl Whose {
    /// A form's `whose` field (absent: the organisation's, as the forms of an app connected once
    /// have always posted).
    pub(super) fn of(fields: &[(String, String)]) -> Whose {
        if field(fields, "whose") == "own" {
            Whose::Own
        } else {
            Whose::Organization
        }
    }

    fn name(self) -> &'static str {
        match self {
            Whose::Own => "own",
            Whose::Organization => "organization",
        }
    }

    /// The management path's query: a per-user app's organisation connection is named so.
    pub(super) fn query(self, per_user: bool) -> &'static str {
        if self == Whose::Organization && per_user {
            "?organization=true"
        } else {
            ""
        }
    }
}

/// An elicitation id as the page takes it: toolgate's ids are letters, digits and `_`; anything
/// else is no id (never echoed, never looked up).
fn id_like(s: &str) -> Option<&str> {
    (s.len() <= 80 && !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
        .then_some(s)
}

/// What the page makes of an elicitation id: the app of the person's own call, `None` when it
/// is unknown or expired (the person still connects), a 403 when it was another's call.
fn check(ctx: &Ctx<'_>, id: &str) -> Result<Option<String>, ApiError> {
    let found = ctx.server.mcp.elicitations.found(id, &ctx.user.org_id, &ctx.user.id);
    if found.another() {
        tracing::warn!(user = %ctx.user.id, "a connect link of another person's call was opened");
        return Err(ApiError::Forbidden(NOT_YOURS.into()));
    }
    Ok(found.theirs().map(str::to_string))
}

/// What the apps page was opened for: `?connect=<app>`, maybe with the elicitation it answers.
pub(super) struct Asked {
    pub(super) app: String,
    pub(super) elicitation: Option<String>,
    /// The elicitation is the person's own call's (else unknown or expired).
    theirs: bool,
}

impl Asked {
    /// The page's `?connect=` and `?elicitation=`; another person's elicitation is refused.
    pub(super) fn of(ctx: &Ctx<'_>) -> Result<Option<Asked>, ApiError> {
        let Some(app) = ctx.query("connect") else { return Ok(None) };
        let elicitation = ctx.query("elicitation").and_then(id_like).map(str::to_string);
        let theirs = match &elicitation {
            Some(id) => check(ctx, id)?,
            None => None,
        };
        let app = theirs.clone().unwrap_or_else(|| app.to_string());
        Ok(Some(Asked { app, elicitation, theirs: theirs.is_some() }))
    }

    /// The section put first on the page: the app's connect forms (`forms`, the row's own
    /// actions carrying the elicitation) and what connecting will do.
    pub(super) fn section(&self, found: bool, forms: &str) -> String {
        let app = escape(&self.app);
        let says = match (&self.elicitation, self.theirs, found) {
            (_, _, false) => format!("There is no app <code>{app}</code> to connect."),
            (Some(_), true, _) => format!(
                "Your MCP client asked you to connect <strong>{app}</strong> with your own account. Once it is \
                 connected here, your client is told and can retry its call."
            ),
            (Some(_), false, _) => format!(
                "The request of this link has expired or is not known here: connect <strong>{app}</strong> \
                 here, then retry the call in your client."
            ),
            (None, ..) => format!("Connect <strong>{app}</strong> with your own account."),
        };
        format!(
            "<section class=\"connect-asked\" id=\"connect\" aria-labelledby=\"connect-title\">\
             <h2 id=\"connect-title\">Connect {app}</h2><p>{says}</p>{forms}</section>"
        )
    }
}

/// A form's elicitation, checked again at the POST (the page may be old, the form forged):
/// another person's is refused before anything is connected.
pub(super) fn elicitation_of(ctx: &Ctx<'_>, fields: &[(String, String)]) -> Result<Option<String>, ApiError> {
    let Some(id) = id_like(field(fields, "elicitation")) else { return Ok(None) };
    check(ctx, id)?;
    Ok(Some(id.to_string()))
}

/// The connect succeeded: the elicitation it answers (if any) is completed, on every instance
/// (its session is told wherever its stream is), and the notice says so.
pub(super) fn connected(ctx: &Ctx<'_>, id: &str, elicitation: Option<&str>) -> String {
    let Some(e) = elicitation else { return format!("App {id} connected.") };
    let known = ctx.server.mcp.elicitations.found(e, &ctx.user.org_id, &ctx.user.id).theirs().is_some();
    ctx.server.mcp.complete_url_elicitation(e, &ctx.user.org_id, &ctx.user.id);
    if known {
        format!("App {id} connected. Your MCP client was told and can retry its call.")
    } else {
        format!("App {id} connected. Retry the call in your MCP client.")
    }
}

/// The cookie of an OAuth connect on its way (see [`CONNECT_COOKIE`]).
pub(super) fn oauth_cookie(ctx: &Ctx<'_>, whose: Whose, elicitation: Option<&str>) -> String {
    format!(
        "{CONNECT_COOKIE}={}:{}; Path={}{}/apps; HttpOnly; Secure; SameSite=Lax; Max-Age=600",
        whose.name(),
        elicitation.unwrap_or(""),
        ctx.prefix,
        super::PATH
    )
}

/// The cookie that ends it, once the browser is back.
pub(super) fn oauth_cookie_gone(ctx: &Ctx<'_>) -> String {
    format!("{CONNECT_COOKIE}=; Path={}{}/apps; HttpOnly; Secure; SameSite=Lax; Max-Age=0", ctx.prefix, super::PATH)
}

/// What the cookie said: whose connection and which elicitation (the organisation's, none,
/// without one: the connect of an app connected once).
pub(super) fn from_cookie(cookie: Option<&str>) -> (Whose, Option<String>) {
    let (whose, e) = cookie.and_then(|c| c.split_once(':')).unwrap_or(("organization", ""));
    let whose = if whose == "own" { Whose::Own } else { Whose::Organization };
    (whose, id_like(e).map(str::to_string))
}

/// The forms of one connection of app `id` (`ways`: it takes an API key, OAuth): connect, and
/// disconnect when there is one. The member's own carry `whose=own` and the elicitation; the
/// organisation's of a per-user app say so in their labels.
pub(super) fn forms(
    ctx: &Ctx<'_>,
    id: &str,
    ways: (bool, bool),
    (whose, per_user): (Whose, bool),
    elicitation: Option<&str>,
    connected: bool,
) -> String {
    let mut hidden = String::new();
    if whose == Whose::Own {
        hidden.push_str("<input type=\"hidden\" name=\"whose\" value=\"own\">");
    }
    if let Some(e) = elicitation {
        hidden.push_str(&format!("<input type=\"hidden\" name=\"elicitation\" value=\"{}\">", escape(e)));
    }
    let of = if whose == Whose::Organization && per_user { " for the organisation" } else { "" };
    let named = escape(id);
    let form = |to: &str, label: &str, class: &str| {
        format!(
            "{}{hidden}<button type=\"submit\"{class} aria-label=\"{label} {named}{of}\">{label}</button></form>",
            html::form_open(ctx, &format!("/apps/{}/{to}", seg(id)), "inline")
        )
    };
    let mut out = String::new();
    if ways.0 {
        out.push_str(&format!(
            "{}{hidden}<label>API key <input name=\"api_key\" type=\"password\" autocomplete=\"off\" \
             aria-label=\"API key of {named}{of}\"></label><button type=\"submit\" aria-label=\"Connect {named}{of}\">Connect</button></form>",
            html::form_open(ctx, &format!("/apps/{}/connect", seg(id)), "inline"),
        ));
    }
    if ways.1 {
        out.push_str(&form("oauth", "Connect with OAuth", ""));
    }
    if connected {
        out.push_str(&form("disconnect", "Disconnect", " class=\"danger\""));
    }
    out
}

/// Whether the app (a row of `GET /apps`) is connected by each user.
pub(super) fn per_user(app: Option<&Value>) -> bool {
    app.is_some_and(|a| a["connection_scope"] == "user")
}
