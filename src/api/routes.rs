//! The table of management routes: each operation is declared once, as a row (method, path
//! template, who may call it, whether the MFA gate can ask for a second factor, whether it makes
//! credentials, the handler). The router, the scope check, the dispatch and the OpenAPI
//! document's list of operations are all read from it, so a route cannot be served without a
//! scope rule, nor documented without being served, nor the other way round (the tests below).
//!
//! The handlers' `#[utoipa::path]` annotations describe each operation's parameters, bodies and
//! answers; the table decides which operations exist.

use super::{batch, ApiResult, Call};
use crate::edge::error::ApiError;
use http::Method;
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use toolgate_filters::{CredentialKind, Scope};

/// What a route needs of its caller: a scope, any valid credential, a credential that can do
/// everything its user's role allows, or no credential at all (public).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Public,
    AnyCredential,
    Scope(Scope),
    /// Every scope the caller's role allows (`admin` for an Owner or an Admin; a Developer's
    /// five or a Viewer's three `:read` for them): what changing one's own sign-in (the
    /// password, MFA) needs, since a password or a second factor signs in with the whole role.
    WholeRole,
}

/// Whether the handler runs the MFA gate (Decision 9: `X-MFA-Token` when the caller's user has
/// MFA active). The gate itself is called by the handler, after its validation, so that a bad
/// body does not use up an MFA token; this column says where it is, and a test checks each
/// handler against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mfa {
    No,
    Always,
    /// Only in the case named.
    When(&'static str),
}

/// A handler's answer, boxed so that every handler has the one type a table row can hold.
pub(crate) type Handled<'c> = Pin<Box<dyn Future<Output = ApiResult> + Send + 'c>>;
pub(crate) type Handler = for<'c, 'a> fn(&'c Call<'a>) -> Handled<'c>;

/// One management operation.
pub struct Route {
    pub method: Method,
    /// Relative to the version prefix (`/v1`, `/api/v1`); the one parameter is `{id}`.
    pub path: &'static str,
    pub access: Access,
    pub mfa: Mfa,
    /// Makes or changes credentials (keys, service accounts, MFA, passwords, OAuth clients) or
    /// members (adding one, or changing one's role: a member signs in by SSO with the whole
    /// role). A third party acting for a user with an OAuth access token may not, whatever
    /// scopes it was granted: a token that expires must not mint a key that does not, take over
    /// the user's MFA, nor make an Owner.
    pub makes_credentials: bool,
    pub handler: Handler,
    /// `module::function` of the handler, for the tests that hold the table to the handlers.
    pub handler_name: &'static str,
}

macro_rules! routes {
    (@mfa) => { Mfa::No };
    (@mfa $mfa:ident $($why:literal)?) => { Mfa::$mfa $(($why))? };
    (@makes) => { false };
    (@makes credentials) => { true };
    ($(
        $method:ident $path:expr => $module:ident::$function:ident, $access:expr
        $(, mfa $mfa:ident $(($why:literal))?)? $(, makes $what:ident)?;
    )*) => {
        /// Every management operation. Listed in the order of the OpenAPI document's operations.
        pub static ROUTES: &[Route] = &[$(
            Route {
                method: Method::$method,
                path: $path,
                access: $access,
                mfa: routes!(@mfa $($mfa $($why)?)?),
                makes_credentials: routes!(@makes $($what)?),
                handler: {
                    fn handler<'c>(call: &'c Call<'_>) -> Handled<'c> {
                        Box::pin(super::$module::$function(call))
                    }
                    handler
                },
                handler_name: concat!(stringify!($module), "::", stringify!($function)),
            },
        )*];

        /// The operations of the OpenAPI document: the table's handlers' annotations.
        #[derive(utoipa::OpenApi)]
        #[openapi(paths($(super::$module::$function),*))]
        pub(super) struct Operations;
    };
}

use Access::{AnyCredential, Public, WholeRole};
use Scope::{
    Admin, AppsConnectSelf, AppsRead, AppsWrite, GatewaysDelete, GatewaysRead, GatewaysWrite, LogsRead, SessionsManage,
    TeamManage,
};

const fn scope(s: Scope) -> Access {
    Access::Scope(s)
}

// Decision 8 (the scope of each operation) and Decision 9 (the MFA gate), one row per operation.
routes! {
    GET "/openapi.json" => openapi::openapi_json, Public;

    GET "/gateways" => gateways::list, scope(GatewaysRead);
    GET "/gateways/{id}" => gateways::get, scope(GatewaysRead);
    POST "/gateways" => gateways::create, scope(GatewaysWrite);
    PATCH "/gateways/{id}" => gateways::update, scope(GatewaysWrite),
        mfa When("the change loosens one of the gateway's guards (`gateway_guards.rs`)");
    DELETE "/gateways/{id}" => gateways::delete, scope(GatewaysDelete), mfa Always;
    GET "/gateways/{id}/tool-changes" => tool_changes::list, scope(GatewaysRead);
    POST "/gateways/{id}/tool-changes/{sub_id}/approve" => tool_changes::approve, scope(GatewaysWrite), mfa Always;
    POST "/gateways/{id}/tool-changes/{sub_id}/reject" => tool_changes::reject, scope(GatewaysWrite), mfa Always;

    GET "/apps" => apps::list, scope(AppsRead);
    GET "/apps/{id}" => apps::get, scope(AppsRead);
    POST "/apps/{id}/connect" => apps::connect, scope(AppsConnectSelf);
    POST "/apps/{id}/connect/callback" => apps::connect_callback, scope(AppsConnectSelf);
    DELETE "/apps/{id}/connection" => apps::disconnect, scope(AppsConnectSelf);
    POST "/apps/{id}/test" => apps::test, scope(AppsWrite);

    GET "/sessions" => sessions::list, scope(SessionsManage);
    GET "/sessions/{id}" => sessions::get, scope(SessionsManage);
    DELETE "/sessions/{id}" => sessions::delete, scope(SessionsManage);

    GET "/user" => user::get, AnyCredential;
    PATCH "/user" => user::update, AnyCredential;
    // A password signs in with the whole role: setting it needs a credential that already holds
    // it (a leaked narrow key must not become the user).
    PUT "/user/password" => user::set_password, WholeRole, mfa Always, makes credentials;
    // One's own sign-in: the handlers refuse credentials that speak for no person.
    GET "/user/web-sessions" => user::web_sessions, AnyCredential;
    DELETE "/user/web-sessions/{id}" => user::end_web_session, AnyCredential;

    GET "/api-keys" => keys::list, scope(Admin);
    POST "/api-keys" => keys::create, scope(Admin),
        mfa When("the key skips the allowlist (`bypass_ip_whitelist`)"), makes credentials;
    DELETE "/api-keys/{id}" => keys::revoke, scope(Admin),
        mfa When("the key is not a strictly weaker key of the caller's own");
    POST "/api-keys/{id}/rotate" => keys::rotate, scope(Admin), mfa Always, makes credentials;
    GET "/api-keys/{id}/usage" => keys::usage, scope(Admin);

    GET "/service-accounts" => service_accounts::list, scope(Admin);
    POST "/service-accounts" => service_accounts::create, scope(Admin),
        mfa When("the account's rate-limit multiplier is above 1"), makes credentials;
    POST "/service-accounts/{id}/keys" => service_accounts::create_key, scope(Admin), makes credentials;
    DELETE "/service-accounts/{id}" => service_accounts::delete, scope(Admin), mfa Always;

    GET "/team/members" => team::list, scope(TeamManage);
    // A member signs in with its role: making or raising an Owner or an Admin also needs a
    // credential holding every scope of that role (`authority::may_grant_role`).
    POST "/team/members" => team::create, scope(TeamManage), mfa Always, makes credentials;
    PATCH "/team/members/{id}" => team::update, scope(TeamManage), mfa Always, makes credentials;
    DELETE "/team/members/{id}" => team::delete, scope(TeamManage), mfa Always;

    PATCH "/account/security" => account::update_security, scope(Admin), mfa Always;
    POST "/account/whitelist" => account::add_whitelist, scope(Admin), mfa Always;
    GET "/account/whitelist" => account::list_whitelist, scope(Admin);
    DELETE "/account/whitelist/{id}" => account::delete_whitelist, scope(Admin), mfa Always;

    GET "/rate-limit" => limits::status, AnyCredential;
    GET "/metrics/rate-limits" => limits::report, scope(LogsRead);

    GET "/logs" => logs::list, scope(LogsRead);
    GET "/logs/analytics" => logs::analytics, scope(LogsRead);
    GET "/logs/{id}" => logs::get, scope(LogsRead);
    GET "/metrics/gateway/{id}" => logs::gateway_metrics, scope(LogsRead);
    GET "/metrics/app/{id}" => logs::app_metrics, scope(LogsRead);

    GET "/auth/verify" => auth::verify, AnyCredential;
    GET "/auth/debug" => auth::debug, AnyCredential;

    // Changing MFA is account security (a second factor signs in with the whole role);
    // answering a challenge needs the code, not rights.
    POST "/auth/mfa/enroll" => mfa::enroll, WholeRole, makes credentials;
    POST "/auth/mfa/activate" => mfa::activate, WholeRole, makes credentials;
    POST "/auth/mfa/verify" => mfa::verify, AnyCredential;
    DELETE "/auth/mfa" => mfa::disable, WholeRole, mfa Always, makes credentials;
    POST "/auth/mfa/reset" => mfa::reset, scope(Admin), mfa When("the caller is not the operator"), makes credentials;

    GET "/webhooks" => webhooks::list, scope(Admin);
    POST "/webhooks" => webhooks::create, scope(Admin);
    PATCH "/webhooks/{id}" => webhooks::update, scope(Admin);
    DELETE "/webhooks/{id}" => webhooks::delete, scope(Admin);
    GET "/webhooks/{id}/deliveries" => webhooks::deliveries, scope(Admin);
    POST "/webhooks/{id}/rotate-secret" => webhooks::rotate, scope(Admin);
    POST "/webhooks/{id}/test" => webhooks::test, scope(Admin);

    GET "/alerts" => alerts::list, scope(Admin);
    POST "/alerts" => alerts::create, scope(Admin);
    GET "/alerts/{id}" => alerts::get, scope(Admin);
    DELETE "/alerts/{id}" => alerts::delete, scope(Admin);

    // Each operation is checked as if sent alone.
    POST batch::PATH => batch::run, AnyCredential;

    GET "/oauth/clients" => oauth_clients::list, scope(Admin);
    POST "/oauth/clients" => oauth_clients::create, scope(Admin), makes credentials;
    GET "/oauth/clients/{id}" => oauth_clients::get, scope(Admin);
    DELETE "/oauth/clients/{id}" => oauth_clients::delete, scope(Admin);

    GET "/audit" => audit::list, scope(Admin);
    GET "/audit/export" => audit::export, scope(Admin);
    GET "/audit/key" => audit::key, scope(Admin);

    // The operator's owner with `admin` (checked by the handler); to everyone else a 404.
    POST "/admin/reload" => admin::reload, AnyCredential;
}

impl Route {
    /// Whether the call's credential may run this route: the access rule, then the rule for
    /// delegated OAuth tokens.
    pub fn admit(&self, call: &Call<'_>) -> Result<(), ApiError> {
        match self.access {
            Access::Public => {}
            Access::AnyCredential => {
                call.who()?;
            }
            Access::Scope(scope) => {
                if !call.who()?.scopes.allows(scope) {
                    return Err(ApiError::InsufficientScope(scope.as_str()));
                }
            }
            Access::WholeRole => {
                let who = call.who()?;
                if let Some(scope) = super::authority::missing_for_role(who.scopes, who.role) {
                    return Err(ApiError::InsufficientScope(scope.as_str()));
                }
            }
        }
        if self.makes_credentials
            && call.principal.as_deref().is_some_and(|p| matches!(p.credential, CredentialKind::OAuthToken { .. }))
        {
            return Err(ApiError::Forbidden(
                "a delegated OAuth token cannot make or change credentials or members (keys, service accounts, MFA, passwords, OAuth clients, team members and their roles)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// A path template of the table with the routes served on it: a path that matches none is a 404,
/// a method it does not serve a 405.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub path: &'static str,
    routes: Vec<&'static Route>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.method, self.path, self.handler_name)
    }
}

impl Endpoint {
    /// The route of `method` on this path; `Err` (405) when the method is not served here.
    pub(crate) fn operation(&self, method: &Method) -> Result<&'static Route, ApiError> {
        self.routes
            .iter()
            .find(|r| r.method == *method)
            .copied()
            .ok_or_else(|| ApiError::MethodNotAllowed(method.as_str().to_string()))
    }

    /// Whether `method` here needs no credential.
    pub(crate) fn is_public(&self, method: &Method) -> bool {
        self.operation(method).is_ok_and(|r| r.access == Access::Public)
    }

    /// `/batch`, whatever the method (its operations are charged before it runs; a batch may
    /// not contain it).
    pub(crate) fn is_batch(&self) -> bool {
        self.path == batch::PATH
    }
}

struct Table {
    endpoints: Vec<Endpoint>,
    router: matchit::Router<usize>,
}

/// The table grouped by path template, and the router over the templates.
fn build() -> Result<Table, String> {
    let mut endpoints: Vec<Endpoint> = Vec::new();
    for route in ROUTES {
        match endpoints.iter_mut().find(|e| e.path == route.path) {
            Some(e) if e.routes.iter().any(|r| r.method == route.method) => {
                return Err(format!("two routes for {} {}", route.method, route.path));
            }
            Some(e) => e.routes.push(route),
            None => endpoints.push(Endpoint { path: route.path, routes: vec![route] }),
        }
    }
    let mut router = matchit::Router::new();
    for (i, e) in endpoints.iter().enumerate() {
        router.insert(e.path, i).map_err(|err| format!("{}: {err}", e.path))?;
    }
    Ok(Table { endpoints, router })
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    // The table is a constant, checked by the tests below; a bad row fails them, not a request.
    TABLE.get_or_init(|| build().expect("the route table is valid"))
}

/// Finds the endpoint and its `{id}` for a path relative to the version prefix, and the
/// `{sub_id}` of a record under that one (a gateway's tool change).
pub(crate) fn route(path: &str) -> Option<(&'static Endpoint, Option<&str>, Option<&str>)> {
    let path = if path.len() > 1 { path.trim_end_matches('/') } else { path };
    let table = table();
    let m = table.router.at(path).ok()?;
    Some((&table.endpoints[*m.value], m.params.get("id"), m.params.get("sub_id")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn no_two_rows_share_method_and_path() {
        let mut seen = BTreeSet::new();
        for r in ROUTES {
            assert!(seen.insert((r.method.as_str(), r.path)), "two rows for {r:?}");
        }
        build().expect("the table builds");
    }

    #[test]
    fn every_path_template_is_valid_for_the_router_and_finds_its_rows() {
        for r in ROUTES {
            assert!(r.path.starts_with('/'), "{r:?}: a template starts with /");
            assert!(r.path.len() == 1 || !r.path.ends_with('/'), "{r:?}: no trailing / (route() trims it)");
            // `route` reads the parameters by their names: `{id}`, then `{sub_id}` under it.
            let params: Vec<&str> = r.path.match_indices('{').map(|(i, _)| &r.path[i..]).collect();
            assert!(params.first().is_none_or(|p| p.starts_with("{id}")), "{r:?}: the first parameter is {{id}}");
            assert!(params.get(1).is_none_or(|p| p.starts_with("{sub_id}")), "{r:?}: the second is {{sub_id}}");
            assert!(params.len() <= 2, "{r:?}: at most two parameters");
            let concrete = r.path.replace("{id}", "x_1").replace("{sub_id}", "y_2");
            let (endpoint, id, sub_id) = route(&concrete).unwrap_or_else(|| panic!("{r:?}: {concrete} is not routed"));
            assert_eq!(endpoint.path, r.path, "{concrete} routes to another template");
            assert_eq!(id.is_some(), r.path.contains("{id}"), "{r:?}");
            assert_eq!(sub_id, r.path.contains("{sub_id}").then_some("y_2"), "{r:?}");
            assert!(endpoint.operation(&r.method).is_ok_and(|found| std::ptr::eq(found, r)), "{r:?}");
        }
    }

    #[test]
    fn every_route_has_an_access_rule_and_only_the_named_ones_are_public() {
        // `access` is not optional, so every row has a rule; who may call without a credential is
        // the rule that must not spread by accident.
        let public: Vec<String> =
            ROUTES.iter().filter(|r| r.access == Access::Public).map(|r| format!("{} {}", r.method, r.path)).collect();
        assert_eq!(public, ["GET /openapi.json"]);
        for r in ROUTES {
            assert!(!(r.makes_credentials && r.access == Access::Public), "{r:?} makes credentials without one");
            assert!(!(r.mfa != Mfa::No && r.access == Access::Public), "{r:?} asks MFA of nobody");
        }
    }

    #[test]
    fn unknown_paths_and_methods() {
        assert!(route("/nope").is_none());
        assert!(route("/gateways/x/y/z").is_none());
        let (gateways, id, _) = route("/gateways/").expect("a trailing / is trimmed");
        assert_eq!((gateways.path, id), ("/gateways", None));
        let err = gateways.operation(&Method::PUT).expect_err("PUT /gateways is not served");
        assert_eq!(err.status(), 405);
        assert!(route("/batch").is_some_and(|(e, _, _)| e.is_batch()));
        assert!(
            route("/openapi.json").is_some_and(|(e, _, _)| e.is_public(&Method::GET) && !e.is_public(&Method::POST))
        );
    }

    /// `{gateway_id}` and `{id}` are the same shape.
    fn normalise(path: &str) -> String {
        let mut out = String::new();
        let mut in_param = false;
        for c in path.chars() {
            match c {
                '{' => {
                    in_param = true;
                    out.push_str("{}");
                }
                '}' => in_param = false,
                _ if in_param => {}
                _ => out.push(c),
            }
        }
        out
    }

    fn table_operations() -> BTreeSet<(String, String)> {
        ROUTES.iter().map(|r| (r.method.as_str().to_lowercase(), normalise(&format!("/v1{}", r.path)))).collect()
    }

    #[test]
    fn the_openapi_document_lists_exactly_the_table() {
        let doc = super::super::openapi::document();
        let mut documented = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys() {
                if ["get", "put", "post", "delete", "options", "head", "patch", "trace"].contains(&method.as_str()) {
                    documented.insert((method.clone(), normalise(path)));
                }
            }
        }
        let table = table_operations();
        let missing: Vec<_> = table.difference(&documented).collect();
        let extra: Vec<_> = documented.difference(&table).collect();
        assert!(missing.is_empty(), "in the route table, not in the OpenAPI document: {missing:?}");
        assert!(extra.is_empty(), "in the OpenAPI document, not in the route table: {extra:?}");
    }

    /// A handler as its file declares it: `module::function`, the method and path of its
    /// `#[utoipa::path]` annotation, and where its body runs the MFA gate.
    #[derive(Debug)]
    struct Declared {
        method: String,
        path: String,
        mfa: Mfa,
    }

    /// Reads every annotated handler of `src/api/`.
    fn declared_handlers() -> BTreeMap<String, Declared> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/api");
        let mut out = BTreeMap::new();
        for entry in std::fs::read_dir(dir).expect("src/api") {
            let path = entry.expect("entry").path();
            let Some(module) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else { continue };
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source");
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let Some(rest) = line.strip_prefix("#[utoipa::path(") else { continue };
                let method = rest.split(',').next().unwrap_or_default().trim().to_string();
                let doc_path = rest.split("path = \"").nth(1).and_then(|p| p.split('"').next()).unwrap_or_default();
                let (at, name) = lines[i..]
                    .iter()
                    .enumerate()
                    .find_map(|(j, l)| {
                        let f = ["pub(crate) async fn ", "pub(crate) fn ", "pub async fn ", "pub fn "]
                            .iter()
                            .find_map(|p| l.strip_prefix(p))?;
                        Some((i + j, f.split(['(', '<']).next()?.to_string()))
                    })
                    .unwrap_or_else(|| panic!("{module}.rs:{}: an annotation without a handler", i + 1));
                let body = lines[at..].iter().take_while(|l| **l != "}");
                let mut mfa = Mfa::No;
                for l in body {
                    let code = l.trim_start();
                    if code.starts_with("gate(call)") || code.starts_with("super::mfa::gate(call)") {
                        // At the body's top level the gate always runs; nested, in some case.
                        let top = l.len() - code.len() == 4;
                        mfa = if top || mfa == Mfa::Always { Mfa::Always } else { Mfa::When("") };
                    }
                }
                out.insert(format!("{module}::{name}"), Declared { method, path: doc_path.to_string(), mfa });
            }
        }
        out
    }

    #[test]
    fn every_handler_has_a_row_and_agrees_with_it() {
        let declared = declared_handlers();
        let rows: BTreeMap<&str, &Route> = ROUTES.iter().map(|r| (r.handler_name, r)).collect();
        let unrouted: Vec<&String> = declared.keys().filter(|h| !rows.contains_key(h.as_str())).collect();
        assert!(unrouted.is_empty(), "annotated handlers without a row in the route table: {unrouted:?}");
        for (name, r) in &rows {
            let d = declared.get(*name).unwrap_or_else(|| panic!("{r:?}: the handler has no #[utoipa::path]"));
            assert_eq!(
                (d.method.as_str(), normalise(&d.path)),
                (r.method.as_str().to_lowercase().as_str(), normalise(&format!("/v1{}", r.path))),
                "{name}: its annotation and its row name different operations"
            );
            let same = matches!(
                (d.mfa, r.mfa),
                (Mfa::No, Mfa::No) | (Mfa::Always, Mfa::Always) | (Mfa::When(_), Mfa::When(_))
            );
            assert!(same, "{name}: the row says MFA {:?}, the handler's body {:?}", r.mfa, d.mfa);
        }
    }
}
