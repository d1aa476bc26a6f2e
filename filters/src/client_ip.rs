//! The client address: the socket peer, or, when the peer is a trusted proxy, the right-most
//! `X-Forwarded-For` hop that is not itself trusted. A header from an untrusted peer is ignored,
//! so it cannot be spoofed.

use ipnet::IpNet;
use std::net::IpAddr;

pub fn client_ip(peer: IpAddr, forwarded_for: Option<&str>, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(ip));
    if trusted.is_empty() || !is_trusted(&peer) {
        return peer;
    }
    let Some(header) = forwarded_for else {
        return peer;
    };
    let mut last = peer;
    for hop in header.rsplit(',') {
        match hop.trim().parse::<IpAddr>() {
            Ok(ip) if is_trusted(&ip) => last = ip,
            Ok(ip) => return ip,
            Err(_) => return last,
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spoofed_header_from_untrusted_peer_is_ignored() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let peer: IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!(client_ip(peer, Some("1.2.3.4"), &trusted), peer);
    }

    #[test]
    fn rightmost_untrusted_hop_wins() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let got = client_ip(peer, Some("6.6.6.6, 198.51.100.7, 10.0.0.2"), &trusted);
        assert_eq!(got, "198.51.100.7".parse::<IpAddr>().unwrap());
        assert_eq!(client_ip(peer, None, &trusted), peer);
    }
}
