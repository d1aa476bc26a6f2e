//! The OpenAPI 3.1 document at `/v1/openapi.json`, generated from the handlers' annotations so
//! that it cannot drift from the code.

use super::envelope::{Envelope, ErrorEnvelope, ErrorObject, MessageEnvelope, Meta};
use serde_json::Value;
use std::sync::OnceLock;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components
            .add_security_scheme("api_key_query", SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::new("api_key"))));
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "toolgate management API", description = "The REST management API of toolgate, an MCP gateway. `/api/v1` serves the same API as `/v1`."),
    paths(
        openapi_json,
        super::gateways::list, super::gateways::get, super::gateways::create, super::gateways::update, super::gateways::delete,
        super::apps::list, super::apps::get, super::apps::connect, super::apps::connect_callback, super::apps::disconnect, super::apps::test,
        super::sessions::list, super::sessions::get, super::sessions::delete,
        super::user::get, super::user::update, super::user::set_password, super::user::web_sessions,
        super::user::end_web_session,
        super::keys::create, super::keys::revoke, super::keys::rotate, super::keys::usage,
        super::service_accounts::create, super::service_accounts::create_key,
        super::account::update_security, super::account::add_whitelist, super::account::list_whitelist,
        super::account::delete_whitelist,
        super::limits::status, super::limits::report,
        super::logs::list, super::logs::analytics, super::logs::gateway_metrics, super::logs::app_metrics,
        super::auth::verify, super::auth::debug,
        super::mfa::enroll, super::mfa::activate, super::mfa::verify, super::mfa::disable, super::mfa::reset,
        super::webhooks::list, super::webhooks::create, super::webhooks::update, super::webhooks::delete,
        super::webhooks::deliveries, super::webhooks::rotate, super::webhooks::test,
        super::alerts::list, super::alerts::create, super::alerts::get, super::alerts::delete,
        super::batch::run,
        super::oauth_clients::list, super::oauth_clients::create, super::oauth_clients::get, super::oauth_clients::delete,
        super::admin::reload,
    ),
    components(schemas(Envelope, MessageEnvelope, ErrorEnvelope, ErrorObject, Meta)),
    security(("bearer" = []), ("api_key_query" = [])),
    modifiers(&Security),
)]
struct ApiDoc;

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta", security(()),
    responses((status = 200, description = "the OpenAPI 3.1 document of the management API", content_type = "application/json")))]
#[allow(dead_code)]
fn openapi_json() {}

/// The document, built once.
pub fn document() -> Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| serde_json::to_value(ApiDoc::openapi()).expect("OpenAPI document serialises")).clone()
}
