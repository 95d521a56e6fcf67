//! Address ranges in the config (`trusted_proxies`): an IP network in CIDR notation.

use std::fmt;
use std::net::IpAddr;

/// An IPv4 or IPv6 network, e.g. `10.0.0.0/8`, `fd00::/8`, or one address (`192.0.2.7`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `addr/prefix` or a single address; the address must be the network's first
    /// (`10.1.2.3/8` is refused: it is most likely a typo for a host or for `10.0.0.0/8`).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let network: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IP address"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => {
                    return Err(format!(
                        "the prefix length must be a number from 0 to {max}"
                    ));
                }
            },
        };
        let cidr = Cidr { network, prefix };
        if cidr.mask(network) != network {
            return Err(format!(
                "{addr} is not the first address of a /{prefix} network (did you mean {}/{prefix}?)",
                cidr.mask(network)
            ));
        }
        Ok(cidr)
    }

    /// Whether `ip` is in the network (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.network.is_ipv4() && self.mask(ip) == self.network
    }

    fn mask(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((bits & mask).into())
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((bits & mask).into())
            }
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn networks_and_addresses() {
        let net = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(net.contains("10.200.1.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!net.contains("11.0.0.1".parse().unwrap()));
        assert!(!net.contains("::1".parse().unwrap()));
        let one = Cidr::parse("192.0.2.7").unwrap();
        assert!(one.contains("192.0.2.7".parse().unwrap()));
        assert!(!one.contains("192.0.2.8".parse().unwrap()));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert_eq!(Cidr::parse("::/0").unwrap().to_string(), "::/0");
    }

    #[test]
    fn mistakes_are_refused() {
        assert!(
            Cidr::parse("10.1.2.3/8")
                .unwrap_err()
                .contains("10.0.0.0/8")
        );
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("host.example/8").is_err());
        assert!(Cidr::parse("10.0.0.0/x").is_err());
    }
}
