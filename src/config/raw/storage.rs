//! `storage:`: where records live.

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    backend: Option<String>,
    path: Option<String>,
    url: Option<String>,
    url_env: Option<String>,
    key_prefix: Option<String>,
    connect_timeout_ms: Option<u64>,
    command_timeout_ms: Option<u64>,
    outage_grace_secs: Option<u64>,
    tls_ca_file: Option<String>,
    tls_cert_file: Option<String>,
    tls_key_file: Option<String>,
    cluster: Option<bool>,
    cluster_nodes: Option<Vec<String>>,
}

impl RawStorage {
    pub(super) fn build(self) -> Result<StorageConfig, ConfigError> {
        Ok(match self.backend.as_deref() {
            None | Some("embedded") => {
                let redis_only = [
                    ("storage.url", self.url.is_some()),
                    ("storage.url_env", self.url_env.is_some()),
                    ("storage.key_prefix", self.key_prefix.is_some()),
                    ("storage.outage_grace_secs", self.outage_grace_secs.is_some()),
                    ("storage.cluster", self.cluster.is_some()),
                    ("storage.cluster_nodes", self.cluster_nodes.is_some()),
                ];
                if let Some((field, _)) = redis_only.iter().find(|(_, given)| *given) {
                    return Err(invalid(*field, "only used with backend: redis"));
                }
                self.tls(false)?;
                StorageConfig::Embedded { path: PathBuf::from(self.path.unwrap_or_else(|| "./data".into())) }
            }
            Some("redis") => {
                let url = self.url()?;
                if !["redis://", "rediss://", "unix://", "redis+unix://"].iter().any(|s| url.starts_with(s)) {
                    return Err(invalid(
                        "storage.url",
                        "must start with redis://, rediss:// (TLS) or unix:// (a local socket)",
                    ));
                }
                let tls = self.tls(url.starts_with("rediss://"))?;
                let cluster_nodes = self.cluster_nodes(&url)?;
                if self.path.is_some() {
                    return Err(invalid("storage.path", "only used with backend: embedded"));
                }
                let prefix = self.key_prefix.unwrap_or_else(|| "toolgate".into());
                if prefix.is_empty() || prefix.contains(['{', '}', ' ', '\n']) {
                    return Err(invalid("storage.key_prefix", "must be non-empty, without braces or spaces"));
                }
                let ms = |v: Option<u64>, field: &str, default: u64| match v {
                    Some(0) => Err(invalid(field, "must be at least 1")),
                    Some(n) => Ok(std::time::Duration::from_millis(n)),
                    None => Ok(std::time::Duration::from_millis(default)),
                };
                let grace = self.outage_grace_secs.unwrap_or(300);
                if !(1..=86_400).contains(&grace) {
                    return Err(invalid("storage.outage_grace_secs", "must be between 1 and 86400"));
                }
                StorageConfig::Redis {
                    url,
                    key_prefix: prefix,
                    outage_grace: std::time::Duration::from_secs(grace),
                    connect_timeout: ms(self.connect_timeout_ms, "storage.connect_timeout_ms", 2000)?,
                    command_timeout: ms(self.command_timeout_ms, "storage.command_timeout_ms", 2000)?,
                    tls,
                    cluster_nodes,
                }
            }
            Some(other) => return Err(invalid("storage.backend", format!("`{other}`: expected embedded or redis"))),
        })
    }

    /// The Redis URL: written in the file, or read from the environment variable `url_env`
    /// names, so that a URL holding Redis's password can come from a secret store (a
    /// Kubernetes Secret, systemd's credentials) while the file stays shareable.
    fn url(&self) -> Result<String, ConfigError> {
        let from_env = super::secret_from_env(|| "storage.url_env".into(), self.url_env.as_deref())?;
        match (&self.url, from_env) {
            (Some(url), None) => Ok(url.clone()),
            (None, Some(url)) if !url.is_empty() => Ok(url),
            (None, Some(_)) => Err(invalid("storage.url_env", "the environment variable is empty")),
            (Some(_), Some(_)) => Err(invalid("storage.url_env", "give storage.url or storage.url_env, not both")),
            (None, None) => Err(invalid("storage.url", "required with backend: redis (or storage.url_env)")),
        }
    }

    /// With `cluster: true`, the seed nodes beside `url` (`Some`, maybe empty); `None` for a
    /// single server. A cluster is reached over TCP, every seed by the same scheme as `url`.
    fn cluster_nodes(&self, url: &str) -> Result<Option<Vec<String>>, ConfigError> {
        if self.cluster != Some(true) {
            if self.cluster_nodes.is_some() {
                return Err(invalid("storage.cluster_nodes", "only used with cluster: true"));
            }
            return Ok(None);
        }
        let scheme = match url.split_once("://") {
            Some((scheme @ ("redis" | "rediss"), _)) => scheme,
            _ => return Err(invalid("storage.url", "a cluster is reached by redis:// or rediss://, not a socket")),
        };
        let nodes = self.cluster_nodes.clone().unwrap_or_default();
        if let Some(node) = nodes.iter().find(|n| n.split_once("://").map(|(s, _)| s) != Some(scheme)) {
            return Err(invalid(
                "storage.cluster_nodes",
                format!("`{node}`: every node must be a {scheme}:// url like storage.url"),
            ));
        }
        Ok(Some(nodes))
    }

    /// The TLS files, read now so that a wrong path stops the start rather than the first
    /// connection.
    fn tls(&self, rediss: bool) -> Result<RedisTls, ConfigError> {
        let given = [
            ("storage.tls_ca_file", &self.tls_ca_file),
            ("storage.tls_cert_file", &self.tls_cert_file),
            ("storage.tls_key_file", &self.tls_key_file),
        ];
        if !rediss {
            if let Some((field, _)) = given.iter().find(|(_, v)| v.is_some()) {
                return Err(invalid(*field, "only used with a rediss:// url"));
            }
            return Ok(RedisTls::default());
        }
        let read = |field: &str, file: &str| {
            let pem = std::fs::read(file).map_err(|e| invalid(field, format!("`{file}`: {e}")))?;
            if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
                return Err(invalid(field, format!("`{file}` holds no PEM block")));
            }
            Ok(pem)
        };
        let ca = match &self.tls_ca_file {
            Some(file) => {
                let pem = super::read_ca_pem(file).map_err(|m| invalid("storage.tls_ca_file", m))?;
                Some(TlsRoots { file: PathBuf::from(file), pem: pem.into() })
            }
            None => None,
        };
        let client = match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Some(ClientIdentity {
                cert_file: PathBuf::from(cert),
                cert_pem: read("storage.tls_cert_file", cert)?.into(),
                key_pem: read("storage.tls_key_file", key)?.into(),
            }),
            (None, None) => None,
            (Some(_), None) => return Err(invalid("storage.tls_key_file", "required with tls_cert_file")),
            (None, Some(_)) => return Err(invalid("storage.tls_cert_file", "required with tls_key_file")),
        };
        Ok(RedisTls { ca, client })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, StorageConfig};

    fn redis(extra: &str) -> Result<Config, ConfigError> {
        Config::parse(&format!("storage:\n  backend: redis\n{extra}"))
    }

    fn refused_field(r: Result<Config, ConfigError>) -> String {
        match r {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// `storage.url_env` names the variable holding the URL; the variable is read at load, and
    /// a missing or empty one, both fields at once, or either on the embedded store, is refused
    /// naming the field.
    #[test]
    fn the_redis_url_comes_from_the_file_or_from_the_variable_url_env_names() {
        std::env::set_var("TOOLGATE_TEST_REDIS_URL_ENV", "redis://:pw@redis.internal:6379/2");
        std::env::set_var("TOOLGATE_TEST_REDIS_URL_EMPTY", "");
        let c = redis("  url_env: TOOLGATE_TEST_REDIS_URL_ENV\n").expect("a url from the environment");
        let StorageConfig::Redis { url, .. } = &c.storage else { panic!("not redis: {:?}", c.storage) };
        assert_eq!(url, "redis://:pw@redis.internal:6379/2");
        assert!(redis("  url: redis://127.0.0.1:6379\n").is_ok());
        for (extra, field) in [
            ("  url_env: TOOLGATE_TEST_UNSET_ENV\n", "storage.url_env"),
            ("  url_env: TOOLGATE_TEST_REDIS_URL_EMPTY\n", "storage.url_env"),
            ("  url: redis://a:6379\n  url_env: TOOLGATE_TEST_REDIS_URL_ENV\n", "storage.url_env"),
            ("", "storage.url"),
        ] {
            assert_eq!(refused_field(redis(extra)), field, "{extra}");
        }
        let embedded = Config::parse("storage:\n  url_env: TOOLGATE_TEST_REDIS_URL_ENV\n");
        assert_eq!(refused_field(embedded), "storage.url_env");
    }
}
