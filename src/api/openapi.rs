//! The OpenAPI 3.1 document at `/v1/openapi.json`: the operations of the route table, each
//! described by its handler's annotation, so that it cannot drift from the code.

use super::envelope::{Envelope, ErrorEnvelope, ErrorObject, MessageEnvelope, Meta};
use super::{ApiResult, Call, Reply};
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

/// The document's frame: its title, the envelope schemas and the security schemes. Its
/// operations are the route table's (`routes::Operations`).
#[derive(OpenApi)]
#[openapi(
    info(title = "toolgate management API", description = "The REST management API of toolgate, an MCP gateway. `/api/v1` serves the same API as `/v1`."),
    components(schemas(Envelope, MessageEnvelope, ErrorEnvelope, ErrorObject, Meta)),
    security(("bearer" = []), ("api_key_query" = [])),
    modifiers(&Security),
)]
struct ApiDoc;

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "meta", security(()),
    responses((status = 200, description = "the OpenAPI 3.1 document of the management API", content_type = "application/json")))]
pub(crate) async fn openapi_json(_call: &Call<'_>) -> ApiResult {
    Ok(Reply { raw: true, ..Reply::ok(document()) })
}

/// The document, built once.
pub(crate) fn document() -> Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = ApiDoc::openapi();
        doc.merge(super::routes::Operations::openapi());
        serde_json::to_value(doc).expect("OpenAPI document serialises")
    })
    .clone()
}
