//! The client address that failures and logins are counted under.
//!
//! The client address is the TCP peer, unless the peer is listed in
//! `[server] trusted_proxies`: then `X-Forwarded-For` is read right to left
//! and the first address that is not a trusted proxy is the client (so a
//! client cannot spoof its address by sending its own header through the
//! proxy). IPv6 clients are counted per /64, the block one host usually
//! controls.
//!
//! A peer on a Unix socket has no address: it counts as 0.0.0.0 unless
//! `trusted_proxies` lists `unix`, and then its `X-Forwarded-For` is read
//! the same way (a proxy in front of the socket).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::config::{Server, TrustedProxies};
use crate::http::{Peer, Request};

/// The address failures are counted under: the peer, or (behind a trusted
/// proxy) the right-most untrusted `X-Forwarded-For` entry; IPv6 reduced to
/// its /64, IPv4-mapped IPv6 to IPv4. Without a known peer, 0.0.0.0.
pub fn client_addr(server: &Server, req: &Request) -> IpAddr {
    bucket(client_ip(server, req))
}

/// The client's own address: the peer, or (behind a trusted proxy) the
/// right-most untrusted `X-Forwarded-For` entry. Without a known peer
/// (an untrusted Unix peer), 0.0.0.0.
pub fn client_ip(server: &Server, req: &Request) -> IpAddr {
    forwarded_client(req.remote, &server.trusted_proxies, req)
}

/// Walk `X-Forwarded-For` from the right while the hop is trusted.
fn forwarded_client(peer: Peer, trusted: &TrustedProxies, req: &Request) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.ips.contains(&ip.to_canonical());
    let unknown = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let peer = match peer {
        Peer::Ip(a) if is_trusted(a.ip()) => a.ip(),
        Peer::Unix if trusted.unix => unknown,
        Peer::Ip(a) => return a.ip(),
        Peer::Unix | Peer::Unknown => return unknown,
    };
    let hops: Vec<&str> = req
        .headers
        .iter()
        .filter(|(k, _)| k == "x-forwarded-for")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Some(ip) = parse_hop(hop) else {
            // Garbage: believe nothing further left than the last good hop.
            return client;
        };
        client = ip;
        if !is_trusted(ip) {
            return ip;
        }
    }
    client
}

/// An `X-Forwarded-For` entry: an address, possibly with a port.
fn parse_hop(s: &str) -> Option<IpAddr> {
    s.parse::<IpAddr>()
        .or_else(|_| s.parse::<SocketAddr>().map(|a| a.ip()))
        .ok()
}

/// The counting bucket of an address: IPv4 as is, IPv6 by its /64.
fn bucket(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn req(peer: &str, xff: &[&str]) -> Request {
        let mut r = Request::new("GET", "/").unwrap();
        r.remote = Peer::Ip(SocketAddr::new(ip(peer), 4000));
        r.headers = xff
            .iter()
            .map(|v| ("x-forwarded-for".to_string(), v.to_string()))
            .collect();
        r
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_peers() {
        let trusted = TrustedProxies {
            ips: vec![ip("127.0.0.1"), ip("10.0.0.5")],
            unix: false,
        };
        let walk = |peer: &str, xff: &[&str]| {
            let r = req(peer, xff);
            forwarded_client(r.remote, &trusted, &r)
        };
        // Untrusted peer: its header is ignored.
        assert_eq!(walk("192.0.2.1", &["203.0.113.9"]), ip("192.0.2.1"));
        // Trusted peer: right-most untrusted entry; a spoofed left part is ignored.
        let spoofed = ["6.6.6.6, 203.0.113.9", "10.0.0.5"];
        assert_eq!(walk("127.0.0.1", &spoofed), ip("203.0.113.9"));
        // No header: the peer itself.
        assert_eq!(walk("127.0.0.1", &[]), ip("127.0.0.1"));
        // Garbage stops the walk at the last good hop.
        let garbage = ["203.0.113.9, bogus, 10.0.0.5"];
        assert_eq!(walk("127.0.0.1", &garbage), ip("10.0.0.5"));
        // Ports are tolerated.
        assert_eq!(walk("127.0.0.1", &["203.0.113.9:5555"]), ip("203.0.113.9"));
    }

    #[test]
    fn a_unix_peer_is_believed_only_when_unix_is_trusted() {
        let mut r = req("127.0.0.1", &["203.0.113.9, 10.0.0.5"]);
        r.remote = Peer::Unix;
        let mut trusted = TrustedProxies {
            ips: vec![ip("10.0.0.5")],
            unix: false,
        };
        assert_eq!(forwarded_client(Peer::Unix, &trusted, &r), ip("0.0.0.0"));
        trusted.unix = true;
        assert_eq!(
            forwarded_client(Peer::Unix, &trusted, &r),
            ip("203.0.113.9")
        );
        r.headers.clear();
        assert_eq!(forwarded_client(Peer::Unix, &trusted, &r), ip("0.0.0.0"));
    }

    #[test]
    fn ipv6_counts_per_64_and_mapped_v4_as_v4() {
        assert_eq!(bucket(ip("2001:db8:1:2:3:4:5:6")), ip("2001:db8:1:2::"));
        assert_eq!(bucket(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(bucket(ip("192.0.2.1")), ip("192.0.2.1"));
    }
}
