//! SAML 2.0 single sign-on (`web.saml`): toolgate is the service provider of each
//! organisation's identity provider. SP-initiated only: `GET {auth_url}/saml/login/{org}` sends
//! the browser to the IdP with an authentication request (HTTP-Redirect binding), and the IdP
//! posts its answer to `POST {auth_url}/saml/callback` (HTTP-POST binding).
//!
//! What is checked, and by whom:
//! - The signature, by `samael` on libxmlsec1, against the IdP certificate of the configuration
//!   (never a certificate the response carries), RSA/ECDSA with SHA-256 or stronger. The response
//!   is reduced to what the signature covers before it is read, and a response must carry exactly
//!   one assertion: a second one, signed or not (the shape of signature-wrapping attacks), is
//!   refused before anything else.
//! - The destination (the callback), the audience (toolgate's entity id), the recipient, the
//!   issuer, the time conditions (90 s of issue delay, 3 minutes of clock skew) and
//!   `InResponseTo`, by `samael` again.
//! - Single use and binding to the browser, here: the request is a store record found by the
//!   `RelayState`, taken at the callback (so a replayed response finds nothing) and tied to a
//!   cookie of the browser that started it; the assertion's id is also remembered a day.
//!
//! The user is the organisation's user with the asserted e-mail address, created at the first
//! sign-in (role from `group_roles`, else `default_role`; never `owner`). An existing user's role
//! is left as it is: the IdP's groups shape new accounts, and changing roles stays with owners.

use crate::config::{same_email, SamlIdp};
use crate::data::model::User;
use crate::data::state::NewUserError;
use crate::data::store::{Kind, PutRecord, NO_PARTITION};
use crate::edge::error::ApiError;
use crate::identity::IdentityService;
use base64::Engine;
use samael::service_provider::{ServiceProvider, ServiceProviderBuilder};
use samael::traits::ToXml;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

/// How long a sign-in may take at the IdP.
pub(super) const REQUEST_TTL: Duration = Duration::from_secs(600);
/// How long an assertion's id is remembered against replays.
const ASSERTION_MEMORY: Duration = Duration::from_secs(86_400);
/// The cookie that ties the IdP's answer to the browser that asked.
pub(super) const BROWSER_COOKIE: &str = "toolgate_saml";
/// The largest callback form taken (a signed response is a few kilobytes).
pub(super) const MAX_RESPONSE_FORM_BYTES: usize = 256 * 1024;

/// A sign-in under way, as stored (kind `sign_in_state`, under `saml:` and the SHA-256 of its
/// `RelayState`).
#[derive(Serialize, Deserialize)]
struct Pending {
    organization: String,
    request_id: String,
    next: String,
    /// SHA-256 of the browser cookie's value.
    browser: String,
}

pub(super) struct Started {
    pub redirect_to: String,
    /// The value of [`BROWSER_COOKIE`].
    pub browser: String,
}

pub(super) struct Finished {
    pub user: Arc<User>,
    pub next: String,
}

/// toolgate's entity id as a service provider (also where its metadata is served).
fn entity_id(identity: &IdentityService) -> String {
    let config = identity.state.config();
    format!("{}{}/saml/metadata", config.server.public_url, config.web.path)
}

fn acs_url(identity: &IdentityService) -> String {
    let config = identity.state.config();
    format!("{}{}/saml/callback", config.server.public_url, config.web.path)
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    ApiError::Unavailable(format!("single sign-on is unavailable: {e}"))
}

/// The service provider facing `idp`.
fn service_provider(identity: &IdentityService, idp: &SamlIdp) -> Result<ServiceProvider, ApiError> {
    let cert = base64::engine::general_purpose::STANDARD.encode(&idp.certificate_der);
    let idp_metadata: samael::metadata::EntityDescriptor = format!(
        "<md:EntityDescriptor xmlns:md=\"urn:oasis:names:tc:SAML:2.0:metadata\" entityID=\"{}\">\
                 <md:IDPSSODescriptor protocolSupportEnumeration=\"urn:oasis:names:tc:SAML:2.0:protocol\">\
                 <md:KeyDescriptor use=\"signing\"><ds:KeyInfo xmlns:ds=\"http://www.w3.org/2000/09/xmldsig#\">\
                 <ds:X509Data><ds:X509Certificate>{cert}</ds:X509Certificate></ds:X509Data></ds:KeyInfo>\
                 </md:KeyDescriptor><md:SingleSignOnService \
                 Binding=\"urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect\" Location=\"{}\"/>\
                 </md:IDPSSODescriptor></md:EntityDescriptor>",
        super::pages::escape(&idp.idp_entity_id),
        super::pages::escape(&idp.sso_url)
    )
    .parse()
    .map_err(|e| unavailable(format!("the IdP's description: {e}")))?;
    use samael::crypto::AllowedSignatureAlgorithm as A;
    ServiceProviderBuilder::default()
        .entity_id(entity_id(identity))
        .metadata_url(entity_id(identity))
        .acs_url(acs_url(identity))
        .slo_url(None)
        .idp_metadata(idp_metadata)
        .authn_name_id_format(None)
        .allowed_signature_algorithms(Some(vec![
            A::RsaSha256,
            A::RsaSha384,
            A::RsaSha512,
            A::EcdsaSha256,
            A::EcdsaSha384,
            A::EcdsaSha512,
        ]))
        .build()
        .map_err(unavailable)
}

/// `GET {auth_url}/saml/metadata`: toolgate's service-provider metadata, for the IdP: its
/// entity id, the callback (HTTP-POST), signed assertions wanted, e-mail name ids. No single
/// logout: a web session ends at toolgate's sign-out.
pub(super) fn metadata(identity: &IdentityService) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
         <md:EntityDescriptor xmlns:md=\"urn:oasis:names:tc:SAML:2.0:metadata\" entityID=\"{}\">\
         <md:SPSSODescriptor AuthnRequestsSigned=\"false\" WantAssertionsSigned=\"true\" \
         protocolSupportEnumeration=\"urn:oasis:names:tc:SAML:2.0:protocol\">\
         <md:NameIDFormat>urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress</md:NameIDFormat>\
         <md:AssertionConsumerService Binding=\"urn:oasis:names:tc:SAML:2.0:bindings:HTTP-POST\" \
         Location=\"{}\" index=\"0\" isDefault=\"true\"/></md:SPSSODescriptor></md:EntityDescriptor>",
        super::pages::escape(&entity_id(identity)),
        super::pages::escape(&acs_url(identity))
    )
}

fn idp_of(identity: &IdentityService, org: &str) -> Result<SamlIdp, ApiError> {
    let idp = identity.state.config().web.saml.iter().find(|s| s.organization == org).cloned();
    idp.filter(|_| identity.state.org(org).is_some()).ok_or(ApiError::NotFound("single sign-on for this organisation"))
}

/// Starts a sign-in with the IdP of organisation `org`.
pub(super) async fn start(identity: &IdentityService, org: &str, next: &str) -> Result<Started, ApiError> {
    let idp = idp_of(identity, org)?;
    let sp = service_provider(identity, &idp)?;
    let mut request = sp.make_authentication_request(&idp.sso_url).map_err(unavailable)?;
    // An XML id (a letter first), unguessable; samael's own is a 32-bit number.
    request.id = format!("_{}", crate::base::secrets::new_session_id());
    let xml = request.to_string().map_err(|e| unavailable(format!("{e:?}")))?;
    let mut deflate = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    deflate.write_all(xml.as_bytes()).map_err(unavailable)?;
    let encoded = base64::engine::general_purpose::STANDARD.encode(deflate.finish().map_err(unavailable)?);
    let relay_state = crate::base::secrets::new_session_id();
    let browser = crate::base::secrets::new_session_id();
    let pending = Pending {
        organization: org.to_string(),
        request_id: request.id.clone(),
        next: next.to_string(),
        browser: crate::base::secrets::hash_key(&browser),
    };
    let expires = crate::base::time::now_ms() + REQUEST_TTL.as_millis() as i64;
    let key = format!("saml:{}", crate::base::secrets::hash_key(&relay_state));
    identity.signin.store.put_record_until(Kind::SignInState, NO_PARTITION, &key, &pending, expires).await?;
    let mut to = url::Url::parse(&idp.sso_url).map_err(unavailable)?;
    to.query_pairs_mut().append_pair("SAMLRequest", &encoded).append_pair("RelayState", &relay_state);
    Ok(Started { redirect_to: to.into(), browser })
}

fn refused(why: impl std::fmt::Display) -> ApiError {
    ApiError::Forbidden(format!("the identity provider's answer is refused: {why}"))
}

/// How many SAML assertions (encrypted or not) the document holds, wherever they are.
fn assertions_in(xml: &str) -> Result<usize, ApiError> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::NsReader::from_str(xml);
    let mut count = 0;
    loop {
        match reader.read_resolved_event() {
            Ok((ns, Event::Start(e) | Event::Empty(e))) => {
                let saml = matches!(ns, quick_xml::name::ResolveResult::Bound(n)
                    if n.as_ref() == b"urn:oasis:names:tc:SAML:2.0:assertion");
                if saml && matches!(e.local_name().as_ref(), b"Assertion" | b"EncryptedAssertion") {
                    count += 1;
                }
            }
            Ok((_, Event::Eof)) => return Ok(count),
            Ok(_) => {}
            Err(e) => return Err(refused(format!("it is not well-formed XML ({e})"))),
        }
    }
}

/// The first value of the attribute named `wanted` (by Name or FriendlyName), or of the first
/// of `defaults` present.
fn attribute<'a>(assertion: &'a samael::schema::Assertion, wanted: Option<&str>, defaults: &[&str]) -> Vec<&'a str> {
    let names: Vec<&str> = wanted.map(|w| vec![w]).unwrap_or_else(|| defaults.to_vec());
    let attributes = assertion.attribute_statements.iter().flatten().flat_map(|s| s.attributes.iter());
    for name in names {
        let found = attributes.clone().find(|a| {
            a.name.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(name))
                || a.friendly_name.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(name))
        });
        if let Some(a) = found {
            return a.values.iter().filter_map(|v| v.value.as_deref()).collect();
        }
    }
    Vec::new()
}

const EMAIL_NAMES: &[&str] = &[
    "email",
    "mail",
    "urn:oid:0.9.2342.19200300.100.1.3",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress",
];
const NAME_NAMES: &[&str] = &[
    "name",
    "displayName",
    "urn:oid:2.16.840.1.113730.3.1.241",
    "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name",
];
const GROUP_NAMES: &[&str] = &["groups", "memberOf", "http://schemas.microsoft.com/ws/2008/06/identity/claims/groups"];

/// Checks the IdP's answer and finds (or makes) the user it names.
pub(super) async fn finish(
    identity: &IdentityService,
    relay_state: &str,
    response: &str,
    browser: &str,
) -> Result<Finished, ApiError> {
    if relay_state.is_empty() || response.is_empty() {
        return Err(ApiError::validation("SAMLResponse", "the identity provider sent no SAMLResponse and RelayState"));
    }
    let pending = take_pending(identity, relay_state, browser).await?;
    let idp = idp_of(identity, &pending.organization)?;
    let assertion = verified_assertion(identity, &idp, &pending, response).await?;
    let user = user_of(identity, &idp, &pending.organization, &assertion).await?;
    Ok(Finished { user, next: pending.next })
}

/// The sign-in under way that `relay_state` names, used up, if this browser started it.
async fn take_pending(identity: &IdentityService, relay_state: &str, browser: &str) -> Result<Pending, ApiError> {
    let key = format!("saml:{}", crate::base::secrets::hash_key(relay_state));
    let taken = identity.signin.store.take(Kind::SignInState, &key).await?;
    let pending: Pending = taken
        .and_then(|json| serde_json::from_str(&json).ok())
        .ok_or_else(|| refused("it answers no sign-in under way (unknown, expired or already used): sign in again"))?;
    if browser.is_empty()
        || !crate::base::secrets::hashes_equal(&crate::base::secrets::hash_key(browser), &pending.browser)
    {
        return Err(refused("the sign-in was started in another browser"));
    }
    Ok(pending)
}

/// The one assertion of `response`: signed by the IdP, answering `pending`'s request, and not
/// seen before (it is remembered for [`ASSERTION_MEMORY`]).
async fn verified_assertion(
    identity: &IdentityService,
    idp: &SamlIdp,
    pending: &Pending,
    response: &str,
) -> Result<samael::schema::Assertion, ApiError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(response.split_whitespace().collect::<String>())
        .map_err(|_| refused("SAMLResponse is not base64"))?;
    let xml = String::from_utf8(bytes).map_err(|_| refused("SAMLResponse is not UTF-8"))?;
    if assertions_in(&xml)? != 1 {
        return Err(refused("a response must carry exactly one assertion"));
    }
    let sp = service_provider(identity, idp)?;
    let request_id = pending.request_id.clone();
    // libxml2 and xmlsec work synchronously and keep global state: one check at a time, off the
    // request threads.
    static XMLSEC: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let assertion = tokio::task::spawn_blocking(move || {
        let _one = XMLSEC.lock();
        sp.parse_xml_response(&xml, Some(&[request_id.as_str()])).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| ApiError::failed("checking a SAML response", e))?
    .map_err(refused)?;
    let seen = format!(
        "saml-assertion:{}",
        crate::base::secrets::hash_key(&format!("{}|{}", idp.idp_entity_id, assertion.id))
    );
    if identity.signin.store.get(Kind::SignInState, &seen).await?.is_some() {
        return Err(refused("this assertion was used before"));
    }
    let until = crate::base::time::now_ms() + ASSERTION_MEMORY.as_millis() as i64;
    identity.signin.store.put_expiring(Kind::SignInState, NO_PARTITION, &seen, "1".into(), until).await?;
    Ok(assertion)
}

/// The user of `organization` with the assertion's e-mail; made at its first sign-in, with the
/// role its groups map to (`group_roles`, else `default_role`), unless another organisation's
/// user has the address (one e-mail, one organisation: the sign-in is refused).
async fn user_of(
    identity: &IdentityService,
    idp: &SamlIdp,
    organization: &str,
    assertion: &samael::schema::Assertion,
) -> Result<Arc<User>, ApiError> {
    let name_id = assertion.subject.as_ref().and_then(|s| s.name_id.as_ref()).map(|n| n.value.as_str());
    let email = attribute(assertion, idp.email_attribute.as_deref(), EMAIL_NAMES)
        .first()
        .copied()
        .or(name_id.filter(|n| n.contains('@')))
        .map(|e| e.trim().to_lowercase())
        .filter(|e| e.parse::<lettre::Address>().is_ok())
        .ok_or_else(|| refused("it names no e-mail address"))?;
    let existing = identity
        .state
        .users_where(|u| u.org_id == organization && same_email(&u.email, &email))
        .into_iter()
        .min_by(|a, b| a.id.cmp(&b.id));
    if let Some(user) = existing {
        return Ok(user);
    }
    let name = attribute(assertion, idp.name_attribute.as_deref(), NAME_NAMES).first().map(|n| n.to_string());
    let groups = attribute(assertion, idp.groups_attribute.as_deref(), GROUP_NAMES);
    let role = (idp.group_roles.iter())
        .find(|(group, _)| groups.contains(&group.as_str()))
        .map_or(idp.default_role.clone(), |(_, role)| role.clone());
    let user = User {
        id: crate::base::secrets::new_id("usr"),
        org_id: organization.to_string(),
        name: name.unwrap_or_else(|| email.clone()),
        email: email.clone(),
        role,
        created_at: chrono::Utc::now(),
        notification_preferences: Default::default(),
        declared: false,
    };
    let made = identity.state.create_user(user).await.map_err(|e| match e {
        // One e-mail, one organisation: an organisation's IdP cannot claim another's user.
        NewUserError::EmailElsewhere => refused(e),
        NewUserError::Store(e) => e.into(),
    })?;
    tracing::info!(user = made.id, org = made.org_id, role = made.role, "user created at its first SAML sign-in");
    Ok(made)
}
