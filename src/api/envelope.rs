//! The envelope schemas of the OpenAPI document: the shapes every management answer shares.
//! A leaf of `api`, so that the resource files can name them in their annotations while
//! `openapi` lists the resource files' handlers, without the two importing each other.

use serde_json::Value;
use utoipa::ToSchema;

/// Success envelope: `success`, `data`, `meta`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct Envelope {
    success: bool,
    data: Object,
    meta: Meta,
}

/// Success envelope of deletions: `success`, `message`, `meta`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct MessageEnvelope {
    success: bool,
    message: String,
    meta: Meta,
}

/// Error envelope: `success` = false, `error`, `meta`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct ErrorEnvelope {
    success: bool,
    error: ErrorObject,
    meta: Meta,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct ErrorObject {
    /// e.g. VALIDATION_ERROR, UNAUTHORIZED, INSUFFICIENT_SCOPE, NOT_FOUND, CONFLICT, RATE_LIMITED.
    code: String,
    message: String,
    /// `field` and `issue` for VALIDATION_ERROR.
    details: Object,
    /// Seconds; RATE_LIMITED only.
    retry_after: Option<u64>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct Meta {
    /// ISO 8601.
    timestamp: String,
    request_id: String,
}

#[derive(ToSchema)]
#[schema(value_type = Object)]
pub(crate) struct Object(#[allow(dead_code)] Value);
