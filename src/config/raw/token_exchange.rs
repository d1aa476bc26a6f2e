//! `apps[].oauth.token_exchange`: calls to the app go with a token exchanged for each caller's
//! own (RFC 8693, `identity::token_exchange`).

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTokenExchange {
    audience: Option<String>,
    resource: Option<String>,
    subject_token_types: Option<Vec<String>>,
    token_endpoint: Option<String>,
    client_auth: Option<String>,
}

impl RawTokenExchange {
    /// The `i`-th app's exchange settings; `has_secret`: the app's OAuth client has a secret.
    pub(super) fn build(
        self,
        i: usize,
        upstream: &AppUpstream,
        has_secret: bool,
    ) -> Result<TokenExchangeConfig, ConfigError> {
        let f = |name: &str| format!("apps[{i}].oauth.token_exchange{name}");
        // The exchanged token is a bearer credential of an HTTP request: a url app's.
        let AppUpstream::Url(app_url) = upstream else {
            return Err(invalid(f(""), "only applies to an app with a url"));
        };
        if self.audience.as_deref().is_some_and(|a| a.trim().is_empty()) {
            return Err(invalid(f(".audience"), "must not be empty (leave it out to send none)"));
        }
        let resource = self.resource.unwrap_or_else(|| app_url.clone());
        // RFC 8707 section 2: an absolute URI without a fragment.
        match url::Url::parse(&resource) {
            Ok(u) if u.fragment().is_none() => {}
            Ok(_) => return Err(invalid(f(".resource"), format!("`{resource}` must not have a fragment"))),
            Err(e) => return Err(invalid(f(".resource"), format!("`{resource}` is not an absolute URI: {e}"))),
        }
        let subject_token_types = subject_token_types(self.subject_token_types, &f(".subject_token_types"))?;
        if let Some(url) = &self.token_endpoint {
            if !url::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
                return Err(invalid(f(".token_endpoint"), format!("`{url}` is not an http(s) URL")));
            }
        }
        let client_auth = match self.client_auth.as_deref() {
            None | Some("client_secret_post") => TokenClientAuth::ClientSecretPost,
            Some("client_secret_basic") if has_secret => TokenClientAuth::ClientSecretBasic,
            Some("client_secret_basic") => {
                return Err(invalid(f(".client_auth"), "client_secret_basic needs oauth.client_secret_env"))
            }
            Some(other) => {
                return Err(invalid(
                    f(".client_auth"),
                    format!("`{other}`: expected client_secret_post or client_secret_basic"),
                ))
            }
        };
        Ok(TokenExchangeConfig {
            audience: self.audience,
            resource,
            subject_token_types,
            token_endpoint: self.token_endpoint,
            client_auth,
        })
    }
}

/// The kinds of caller token that may be exchanged: both unless configured, each named once.
fn subject_token_types(raw: Option<Vec<String>>, field: &str) -> Result<Vec<SubjectTokenType>, ConfigError> {
    let Some(raw) = raw else { return Ok(vec![SubjectTokenType::AccessToken, SubjectTokenType::Jwt]) };
    if raw.is_empty() {
        return Err(invalid(field, "must name at least one of access_token, jwt"));
    }
    let mut types = Vec::with_capacity(raw.len());
    for name in raw {
        let t = match name.as_str() {
            "access_token" => SubjectTokenType::AccessToken,
            "jwt" => SubjectTokenType::Jwt,
            _ => return Err(invalid(field, format!("`{name}`: expected access_token or jwt"))),
        };
        if types.contains(&t) {
            return Err(invalid(field, format!("`{name}` is named twice")));
        }
        types.push(t);
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_app() -> AppUpstream {
        AppUpstream::Url("https://crm.example/mcp".into())
    }

    fn refusal(raw: RawTokenExchange, upstream: &AppUpstream, has_secret: bool) -> String {
        raw.build(0, upstream, has_secret).unwrap_err().to_string()
    }

    #[test]
    fn the_defaults_are_the_apps_url_and_both_token_types() {
        let te = RawTokenExchange::default().build(0, &url_app(), false).unwrap();
        assert_eq!(te.resource, "https://crm.example/mcp");
        assert_eq!(te.subject_token_types, [SubjectTokenType::AccessToken, SubjectTokenType::Jwt]);
        assert_eq!((te.audience, te.token_endpoint, te.client_auth), (None, None, TokenClientAuth::ClientSecretPost));
    }

    #[test]
    fn each_bad_setting_is_refused_naming_its_field() {
        let stdio = AppUpstream::Command { argv: vec!["x".into()], env: Default::default() };
        let e = refusal(RawTokenExchange::default(), &stdio, true);
        assert!(e.starts_with("apps[0].oauth.token_exchange: only applies to an app with a url"), "{e}");
        let cases: [(RawTokenExchange, &str); 6] = [
            (RawTokenExchange { audience: Some(" ".into()), ..Default::default() }, ".audience"),
            (RawTokenExchange { resource: Some("/relative".into()), ..Default::default() }, ".resource"),
            (RawTokenExchange { resource: Some("https://a.example/#x".into()), ..Default::default() }, ".resource"),
            (
                RawTokenExchange { subject_token_types: Some(vec!["saml2".into()]), ..Default::default() },
                ".subject_token_types",
            ),
            (
                RawTokenExchange { token_endpoint: Some("ftp://a.example/token".into()), ..Default::default() },
                ".token_endpoint",
            ),
            (RawTokenExchange { client_auth: Some("private_key_jwt".into()), ..Default::default() }, ".client_auth"),
        ];
        for (raw, field) in cases {
            let e = refusal(raw, &url_app(), true);
            assert!(e.starts_with(&format!("apps[0].oauth.token_exchange{field}:")), "{e}");
        }
        let twice =
            RawTokenExchange { subject_token_types: Some(vec!["jwt".into(), "jwt".into()]), ..Default::default() };
        assert!(refusal(twice, &url_app(), true).contains("named twice"));
        let none = RawTokenExchange { subject_token_types: Some(vec![]), ..Default::default() };
        assert!(refusal(none, &url_app(), true).contains("at least one"));
        let basic = RawTokenExchange { client_auth: Some("client_secret_basic".into()), ..Default::default() };
        assert!(refusal(basic, &url_app(), false).contains("needs oauth.client_secret_env"));
    }
}
