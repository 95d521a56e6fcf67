//! The client's address, as the per-user limits of a tenant without `auth` count it: the TCP
//! peer, or — only when the peer is one of `trusted_proxies` — the address the proxies name in
//! `Forwarded` (RFC 7239) or, without it, `X-Forwarded-For`. The chain is read from the right
//! (the hop the trusted peer added) leftwards past every trusted proxy; the first address not
//! trusted is the client. Whatever a client writes in those headers itself is to the left of
//! what its proxies added, so it is never reached while a trusted proxy precedes it. A hop that
//! is not an address (`unknown`, an obfuscated identifier) stops the walk at the proxy that
//! added it: that proxy's address counts, never a name the client chose.

use std::cell::RefCell;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use axum::http::HeaderMap;

use crate::config::Cidr;

/// The address to count `peer`'s request under, given the trusted proxies.
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[Cidr]) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(peer, trusted) {
        return peer;
    }
    let hops = forwarded_hops(headers).unwrap_or_else(|| x_forwarded_for_hops(headers));
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop {
            Some(addr) => {
                client = addr.to_canonical();
                if !is_trusted(client, trusted) {
                    return client;
                }
            }
            None => return client,
        }
    }
    client
}

fn is_trusted(ip: IpAddr, trusted: &[Cidr]) -> bool {
    trusted.iter().any(|c| c.contains(ip))
}

/// The `for=` of every element of every `Forwarded` header, in order; `None` when there is no
/// `Forwarded` header (then `X-Forwarded-For` is read). An element without `for=`, or with a
/// value that is not an address, is a hop with no address.
fn forwarded_hops(headers: &HeaderMap) -> Option<Vec<Option<IpAddr>>> {
    let mut values = headers.get_all("forwarded").iter().peekable();
    values.peek()?;
    let mut hops = Vec::new();
    for value in values {
        let Ok(text) = value.to_str() else {
            hops.push(None);
            continue;
        };
        for element in text.split(',') {
            let found = element.split(';').find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| node_address(value.trim()))
            });
            hops.push(found.flatten());
        }
    }
    Some(hops)
}

/// Every address of every `X-Forwarded-For` header, in order.
fn x_forwarded_for_hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|v| {
            let text = v.to_str().unwrap_or("unknown");
            text.split(',')
                .map(|hop| node_address(hop.trim()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// An RFC 7239 node (`192.0.2.1`, `"192.0.2.1:80"`, `"[2001:db8::1]:4711"`, `2001:db8::1` in
/// `X-Forwarded-For`) as an address; `None` for `unknown` and obfuscated names.
fn node_address(node: &str) -> Option<IpAddr> {
    let node = node.trim_matches('"');
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    let (host, port) = node.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The budget key of an address: IPv6 clients by their /64 (one subscriber's network, which
/// hands its hosts any number of addresses), IPv4 by address; hashed, so neither logs nor the
/// store keep addresses. Asked on every request of a tenant without `auth`: the keys of the
/// last [`KEY_CACHE`] networks seen on this thread are kept, so a client's requests hash once.
pub fn budget_key(client: IpAddr) -> Arc<str> {
    let network = match client.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        v4 => v4,
    };
    RECENT_KEYS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((_, key)) = cache.entries.iter().find(|(n, _)| *n == network) {
            return key.clone();
        }
        let key = hashed_key(network);
        let slot = cache.next;
        cache.next = (slot + 1) % KEY_CACHE;
        match cache.entries.get_mut(slot) {
            Some(entry) => *entry = (network, key.clone()),
            None => cache.entries.push((network, key.clone())),
        }
        key
    })
}

/// Networks whose budget keys each thread keeps (replaced oldest first).
const KEY_CACHE: usize = 64;

#[derive(Default)]
struct RecentKeys {
    entries: Vec<(IpAddr, Arc<str>)>,
    /// The entry replaced next once all are taken.
    next: usize,
}

thread_local! {
    static RECENT_KEYS: RefCell<RecentKeys> = RefCell::new(RecentKeys::default());
}

/// `c-` and the first 128 bits of SHA-256 of the network's text (`192.0.2.1`,
/// `2001:db8:1:2::/64`), in hex.
fn hashed_key(network: IpAddr) -> Arc<str> {
    let text = match network {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("{v6}/64"),
    };
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(34);
    out.push_str("c-");
    for b in &digest.as_ref()[..16] {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out.into()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_writes() {
        let h = headers(&[("x-forwarded-for", "1.2.3.4"), ("forwarded", "for=1.2.3.4")]);
        assert_eq!(
            client_address(ip("203.0.113.9"), &h, &[]),
            ip("203.0.113.9")
        );
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        assert_eq!(
            client_address(ip("203.0.113.9"), &h, &trusted),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn a_trusted_chain_is_read_from_the_right() {
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        // The client forged 6.6.6.6; the ingress (10.0.0.2) appended the real peer.
        let h = headers(&[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.2")]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &h, &trusted),
            ip("198.51.100.7")
        );
        // Two header lines count as one list.
        let h = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "198.51.100.7"),
        ]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &h, &trusted),
            ip("198.51.100.7")
        );
        // Forwarded wins over X-Forwarded-For; quoted, bracketed, with ports.
        let h = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            (
                "forwarded",
                "for=\"[2001:db8:cafe::17]:4711\";proto=https, for=10.0.0.3",
            ),
        ]);
        assert_eq!(
            client_address(ip("::ffff:10.0.0.1"), &h, &trusted),
            ip("2001:db8:cafe::17")
        );
        let h = headers(&[("forwarded", "for=\"192.0.2.60:8080\"")]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &h, &trusted),
            ip("192.0.2.60")
        );
    }

    #[test]
    fn unknown_hops_and_missing_headers_count_the_proxy() {
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        let h = headers(&[("forwarded", "for=unknown")]);
        assert_eq!(client_address(ip("10.0.0.1"), &h, &trusted), ip("10.0.0.1"));
        let h = headers(&[("x-forwarded-for", "198.51.100.7, _hidden, 10.0.0.5")]);
        assert_eq!(client_address(ip("10.0.0.1"), &h, &trusted), ip("10.0.0.5"));
        assert_eq!(
            client_address(ip("10.0.0.1"), &HeaderMap::new(), &trusted),
            ip("10.0.0.1")
        );
        // Every hop trusted: the leftmost.
        let h = headers(&[("x-forwarded-for", "10.9.9.9, 10.0.0.5")]);
        assert_eq!(client_address(ip("10.0.0.1"), &h, &trusted), ip("10.9.9.9"));
    }

    #[test]
    fn budget_keys_group_ipv6_by_64_and_hide_the_address() {
        let a = budget_key(ip("2001:db8:1:2:aaaa::1"));
        assert_eq!(a, budget_key(ip("2001:db8:1:2:ffff::9")));
        assert_ne!(a, budget_key(ip("2001:db8:1:3::1")));
        assert_eq!(
            budget_key(ip("192.0.2.1")),
            budget_key(ip("::ffff:192.0.2.1"))
        );
        assert_ne!(budget_key(ip("192.0.2.1")), budget_key(ip("192.0.2.2")));
        assert!(!a.contains("2001") && a.starts_with("c-") && a.len() == 34);
    }

    #[test]
    fn budget_keys_stay_what_earlier_versions_stored() {
        // Keys name limits' counters in Redis: replicas of different versions must agree.
        // SHA-256 of the network's text, first 16 bytes in hex (computed outside Rust).
        assert_eq!(
            &*budget_key(ip("192.0.2.1")),
            "c-37fcff24bf62035b2b08020afc08b4fe"
        );
        assert_eq!(
            &*budget_key(ip("2001:db8:1:2:3:4:5:6")),
            "c-7437dddbc0275bcfe536fa291fb82060"
        );
    }

    #[test]
    fn the_key_cache_answers_like_the_hash_past_its_size() {
        // More networks than the cache holds, twice over: every answer is the network's own.
        for round in 0..2 {
            for i in 0..(KEY_CACHE as u32 * 2) {
                let addr = IpAddr::V4(std::net::Ipv4Addr::from(0xc000_0200 + i));
                assert_eq!(budget_key(addr), hashed_key(addr), "round {round}, {addr}");
            }
        }
    }
}
