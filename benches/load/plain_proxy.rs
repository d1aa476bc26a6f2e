//! The load benchmark's baseline (`benches/load.sh`): a plain Pingora reverse proxy with no MCP
//! logic and no filters, built the way toolgate builds its server (`ServerConf`, same number of
//! worker threads), so the difference between this hop and toolgate is what toolgate adds.
//!
//! ```text
//! cargo run --release --example plain_proxy -- --listen 127.0.0.1:0 --upstream 127.0.0.1:PORT [--threads 2]
//! ```
//!
//! Every request is proxied as is (HTTP/1.1, pooled keep-alive connections) to `--upstream`.
//! With `--listen ...:0` the kernel picks the port; read it back with `ss -ltnp`.

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::proxy::{ProxyHttp, Session};
use pingora::server::configuration::{Opt, ServerConf};

struct PlainProxy {
    upstream: String,
}

#[async_trait]
impl ProxyHttp for PlainProxy {
    type CTX = ();

    fn new_ctx(&self) {}

    /// Every request goes to the one upstream, plain HTTP.
    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream.as_str(), false, String::new())))
    }
}

fn main() {
    let mut listen = "127.0.0.1:0".to_string();
    let mut upstream = None;
    let mut threads = 2;
    let mut work_stealing = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--listen" => listen = value(),
            "--upstream" => upstream = Some(value()),
            "--threads" => threads = value().parse().expect("--threads N"),
            "--work-stealing" => work_stealing = value().parse().expect("--work-stealing true|false"),
            other => panic!(
                "usage: plain_proxy --listen ADDR --upstream HOST:PORT [--threads N] [--work-stealing BOOL], got `{other}`"
            ),
        }
    }
    let upstream = upstream.expect("--upstream HOST:PORT is required");

    let conf = ServerConf { threads, work_stealing, ..ServerConf::default() };
    let mut server = pingora::server::Server::new_with_opt_and_conf(Opt::default(), conf);
    server.bootstrap();
    let mut service = pingora::proxy::http_proxy_service(&server.configuration, PlainProxy { upstream });
    service.add_tcp(&listen);
    server.add_service(service);
    server.run_forever()
}
