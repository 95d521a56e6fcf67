//! Which accepted connections are served: at most `max` open at once on a listener, and at
//! most `per_client` from one peer IP. A served connection holds a [`Ticket`] for its whole
//! life; dropping it frees both counts.
//!
//! The global count is one atomic; the per-client counts live in a sharded map (a lock per
//! shard, never one for the whole map) whose entries are removed when a client's count drops
//! to zero, so the map holds at most one entry per open connection.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use prometheus::IntGauge;

/// Why a connection was not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The listener has `max` connections open (answered 503).
    Full,
    /// This peer has `per_client` connections open (answered 429).
    PerClient,
}

impl Refusal {
    /// The metrics label: the setting that refused it.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Full => "max_connections",
            Refusal::PerClient => "max_connections_per_client",
        }
    }
}

/// The counts of one listener.
#[derive(Debug, Clone)]
pub struct Admission {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    open: AtomicUsize,
    max: usize,
    per_client: usize,
    clients: DashMap<IpAddr, usize>,
    /// `switchyard_connections_open{listener}`.
    gauge: IntGauge,
}

/// A served connection's place in the counts.
#[derive(Debug)]
pub struct Ticket {
    inner: Arc<Inner>,
    /// `None` when the per-client cap cannot bind (it is not below `max`).
    client: Option<IpAddr>,
}

impl Admission {
    pub fn new(max: usize, per_client: usize, gauge: IntGauge) -> Admission {
        Admission {
            inner: Arc::new(Inner {
                open: AtomicUsize::new(0),
                max,
                per_client,
                clients: DashMap::new(),
                gauge,
            }),
        }
    }

    /// Counts a new connection from `peer` in, or says which cap it would exceed.
    pub fn admit(&self, peer: IpAddr) -> Result<Ticket, Refusal> {
        let inner = &self.inner;
        // Never above `max`, even for an instant (the gauge and tests read it).
        inner
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < inner.max).then_some(open + 1)
            })
            .map_err(|_| Refusal::Full)?;
        // A client cannot reach a per-client cap that is not below the listener's own.
        let client = (inner.per_client < inner.max).then(|| peer.to_canonical());
        if let Some(ip) = client {
            let admitted = match inner.clients.entry(ip) {
                Entry::Occupied(mut e) if *e.get() < inner.per_client => {
                    *e.get_mut() += 1;
                    true
                }
                Entry::Occupied(_) => false,
                Entry::Vacant(e) => {
                    e.insert(1);
                    true
                }
            };
            if !admitted {
                inner.open.fetch_sub(1, Ordering::AcqRel);
                return Err(Refusal::PerClient);
            }
        }
        inner.gauge.inc();
        Ok(Ticket {
            inner: inner.clone(),
            client,
        })
    }

    /// Connections open now.
    #[cfg(test)]
    pub fn open(&self) -> usize {
        self.inner.open.load(Ordering::Acquire)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(ip) = self.client
            && let Entry::Occupied(mut e) = self.inner.clients.entry(ip)
        {
            if *e.get() <= 1 {
                e.remove();
            } else {
                *e.get_mut() -= 1;
            }
        }
        self.inner.open.fetch_sub(1, Ordering::AcqRel);
        self.inner.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn admission(max: usize, per_client: usize) -> Admission {
        Admission::new(max, per_client, IntGauge::new("test_open", "test").unwrap())
    }

    fn v4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn each_address_has_its_own_count_within_the_global_one() {
        let a = admission(5, 2);
        let a1 = a.admit(v4(1)).unwrap();
        let _a2 = a.admit(v4(1)).unwrap();
        assert_eq!(a.admit(v4(1)).unwrap_err(), Refusal::PerClient);
        let _b1 = a.admit(v4(2)).unwrap();
        let _b2 = a.admit(v4(2)).unwrap();
        assert_eq!(a.admit(v4(2)).unwrap_err(), Refusal::PerClient);
        let _c1 = a.admit(v4(3)).unwrap();
        // Five open: the global cap refuses even a client with none.
        assert_eq!(a.admit(v4(4)).unwrap_err(), Refusal::Full);
        assert_eq!(a.open(), 5);
        assert_eq!(a.inner.gauge.get(), 5);
        // A refusal leaves nothing behind; a departure frees both counts.
        drop(a1);
        assert_eq!(a.open(), 4);
        assert_eq!(a.admit(v4(2)).unwrap_err(), Refusal::PerClient);
        let _a3 = a.admit(v4(1)).unwrap();
        assert_eq!(a.admit(v4(1)).unwrap_err(), Refusal::Full);
    }

    #[test]
    fn ipv4_mapped_ipv6_peers_count_as_their_ipv4_address() {
        let a = admission(10, 1);
        let _plain = a.admit(v4(7)).unwrap();
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 7).to_ipv6_mapped());
        assert_eq!(a.admit(mapped).unwrap_err(), Refusal::PerClient);
        let _v6 = a.admit(IpAddr::V6(Ipv6Addr::LOCALHOST)).unwrap();
        assert_eq!(
            a.admit(IpAddr::V6(Ipv6Addr::LOCALHOST)).unwrap_err(),
            Refusal::PerClient
        );
    }

    #[test]
    fn entries_are_removed_when_a_client_has_no_connection_left() {
        let a = admission(1000, 3);
        let tickets: Vec<Ticket> = (0..=255)
            .flat_map(|i| [a.admit(v4(i)).unwrap(), a.admit(v4(i)).unwrap()])
            .collect();
        assert_eq!(a.inner.clients.len(), 256);
        drop(tickets);
        assert_eq!(a.inner.clients.len(), 0);
        assert_eq!(a.open(), 0);
        assert_eq!(a.inner.gauge.get(), 0);
    }

    #[test]
    fn a_per_client_cap_not_below_the_global_one_keeps_no_map() {
        let a = admission(2, 2);
        let _x = a.admit(v4(1)).unwrap();
        let _y = a.admit(v4(1)).unwrap();
        assert_eq!(a.admit(v4(1)).unwrap_err(), Refusal::Full);
        assert_eq!(a.inner.clients.len(), 0);
    }

    #[test]
    fn concurrent_admissions_never_exceed_the_caps() {
        let a = admission(64, 8);
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let a = a.clone();
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    let mut most = 0;
                    for i in 0..2_000u32 {
                        if let Ok(ticket) = a.admit(v4((i % 16) as u8)) {
                            held.push(ticket);
                        }
                        most = most.max(a.open());
                        if held.len() > 4 + t {
                            held.clear();
                        }
                    }
                    most
                })
            })
            .collect();
        for t in threads {
            assert!(t.join().unwrap() <= 64);
        }
        assert_eq!(a.open(), 0);
        assert_eq!(a.inner.clients.len(), 0);
    }
}
