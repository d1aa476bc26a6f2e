//! Where Redis is, and one connection type for both ways of running it: a single server
//! (`storage.url`) or a Redis Cluster (`storage.cluster: true`, where `url` and `cluster_nodes`
//! are seed nodes and the client finds the others). The store, the change feed and the shared
//! rate limits all connect here, so the rest of the code sends commands without asking which.
//!
//! What a cluster asks of those callers: a pipeline, a `MULTI` or a script touches keys of one
//! hash slot only (the store groups its writes by hash tag, the leased merge its scripts by
//! caller). A multi-key `MGET` or `DEL` the cluster client splits by slot itself.

use crate::config::{RedisTls, StorageConfig};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use std::time::Duration;

/// A Redis deployment to connect to.
#[derive(Clone)]
pub(crate) enum Target {
    Single(redis::Client),
    Cluster(Cluster),
}

/// A Redis Cluster: its seed nodes and TLS settings, from which each connection's client is
/// built with that connection's time-outs.
#[derive(Clone)]
pub(crate) struct Cluster {
    nodes: Vec<String>,
    certificates: Option<redis::TlsCertificates>,
}

impl Cluster {
    /// A client whose every command, retries included, ends within `response`. The cluster
    /// client retries a command refused while a node is away (`CLUSTERDOWN`, a moved slot
    /// whose node does not answer) up to 16 times, waiting at least 1.28 s and up to minutes
    /// between tries; only its overall time-out bounds that, and a time-out given per
    /// connection (`ClusterConfig`) bounds each try alone. So the time-outs are the client's.
    fn client(&self, connect: Duration, response: Duration) -> RedisResult<ClusterClient> {
        let mut builder = ClusterClientBuilder::new(self.nodes.iter().map(String::as_str))
            .connection_timeout(connect)
            .response_timeout(response)
            .overall_response_timeout(Some(response));
        if let Some(certificates) = &self.certificates {
            builder = builder.certs(certificates.clone());
        }
        builder.build()
    }
}

impl Target {
    /// The deployment `storage` names (an error for the embedded store, which has none).
    pub(crate) fn of(storage: &StorageConfig) -> RedisResult<Target> {
        let StorageConfig::Redis { url, tls, cluster_nodes, .. } = storage else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "storage.backend is not redis",
            )));
        };
        match cluster_nodes {
            None => Ok(Target::Single(client(url, tls)?)),
            Some(more) => {
                let cluster = Cluster {
                    nodes: std::iter::once(url).chain(more).cloned().collect(),
                    certificates: certificates(tls),
                };
                // Checked now, so that a bad node address stops the start.
                cluster.client(Duration::from_secs(1), Duration::from_secs(1))?;
                Ok(Target::Cluster(cluster))
            }
        }
    }

    /// A connection for many users at once that reconnects by itself after a failure, made
    /// without waiting for Redis (the first command connects). Must be called inside the
    /// runtime it is to live on: its tasks are spawned there.
    pub(crate) fn shared(&self, connect: Duration, response: Duration, retries: usize) -> RedisResult<Conn> {
        Ok(match self {
            Target::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect))
                    .set_response_timeout(Some(response))
                    .set_number_of_retries(retries)
                    .set_max_delay(Duration::from_millis(500));
                Conn::Managed(ConnectionManager::new_lazy_with_config(client.clone(), config)?)
            }
            Target::Cluster(cluster) => {
                Conn::Cluster(cluster.client(connect, response)?.get_pending_async_connection_with_config(
                    ClusterConfig::new().set_connection_timeout(connect).set_response_timeout(response),
                ))
            }
        })
    }

    /// A connection of its own, connected now: for a task that blocks on a read (the change
    /// feed) or that makes its connection again itself after a failure.
    pub(crate) async fn dedicated(&self, connect: Duration, response: Duration) -> RedisResult<Conn> {
        Ok(match self {
            Target::Single(client) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connect))
                    .set_response_timeout(Some(response));
                Conn::Multiplexed(client.get_multiplexed_async_connection_with_config(&config).await?)
            }
            Target::Cluster(cluster) => Conn::Cluster(cluster.client(connect, response)?.get_async_connection().await?),
        })
    }
}

/// A client of the single Redis at `url`: with `rediss://`, over TLS, trusting the system's
/// roots or the configured CA, presenting the configured client certificate.
fn client(url: &str, tls: &RedisTls) -> RedisResult<redis::Client> {
    match certificates(tls) {
        None => redis::Client::open(url),
        Some(certificates) => redis::Client::build_with_tls(url, certificates),
    }
}

/// The configured CA and client certificate, if any (otherwise the system's roots and none).
fn certificates(tls: &RedisTls) -> Option<redis::TlsCertificates> {
    if tls.ca.is_none() && tls.client.is_none() {
        return None;
    }
    Some(redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|c| redis::ClientTlsConfig { client_cert: c.cert_pem.to_vec(), client_key: c.key_pem.to_vec() }),
        root_cert: tls.ca.as_ref().map(|ca| ca.pem.to_vec()),
    })
}

/// A connection to either deployment; cheap to clone (every kind is a handle on a shared
/// multiplexed connection).
#[derive(Clone)]
pub(crate) enum Conn {
    Managed(ConnectionManager),
    Multiplexed(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Managed(c) => c.req_packed_command(cmd),
            Conn::Multiplexed(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Managed(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Multiplexed(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Managed(c) => c.get_db(),
            Conn::Multiplexed(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
