//! Another node announcing the VIP on the link: the evidence a holder waits for before it
//! hands the VIP over (see [`super::holder`]). The successor's `L2Announcer` sends a
//! gratuitous ARP (request form) / unsolicited NA burst when it takes the VIP, and its
//! kernel, which has the VIP on its interface, sends ARP with the VIP as sender address;
//! any ARP with the VIP as sender address, or NA for the VIP, giving a MAC that is not
//! ours counts. The MAC says which node announced (see `Addresses::neighbours_at`).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use ferrolb_proto::l2::arp::{self, Mac};
use ferrolb_proto::l2::ndp::{self, ND_HOP_LIMIT, NdMessage, NdOption};
use ferrolb_proto::l2::socket::{ArpSocket, NdFrameSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The MAC of another node announcing `ip` in an Ethernet frame (as AF_PACKET delivers
/// it): ARP with `ip` as its sender address from a MAC that is not `mine`.
pub fn arp_claim(frame: &[u8], ip: Ipv4Addr, mine: Mac) -> Option<Mac> {
    match arp::decode_frame(frame) {
        Ok((eth, a)) if a.sender_ip == ip && a.sender_mac != mine && eth.src != mine => Some(a.sender_mac),
        _ => None,
    }
}

/// The MAC of another node announcing `ip` in an ICMPv6 message (from its type byte)
/// that arrived with `hop_limit`: a Neighbor Advertisement for `ip` whose target
/// link-layer address is not `mine`.
pub fn nd_claim(msg: &[u8], hop_limit: Option<i32>, ip: Ipv6Addr, mine: Mac) -> Option<Mac> {
    // RFC 4861 §7.1.2: a valid ND message arrives with hop limit 255 (from the link).
    if hop_limit.is_some_and(|h| h != i32::from(ND_HOP_LIMIT)) {
        return None;
    }
    match NdMessage::decode(&mut &msg[..]) {
        Ok(NdMessage::Advertisement(na)) if na.target == ip => na.options.iter().find_map(|o| match o {
            NdOption::TargetLinkLayer(m) if *m != mine => Some(*m),
            _ => None,
        }),
        _ => None,
    }
}

/// An announcement of the VIP by another node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// When it arrived.
    pub at: Instant,
    /// The MAC it gave for the VIP (the announcing node's).
    pub mac: Mac,
}

/// A running watch of one interface; dropping it stops the watch.
#[derive(Debug)]
pub struct Claims {
    seen: watch::Receiver<Option<Seen>>,
    task: JoinHandle<()>,
}

impl Drop for Claims {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Claims {
    /// Watches interface `index` (MAC `mine`) for another node announcing
    /// `ip` (needs `NET_RAW`). Call within a tokio runtime.
    pub fn watch(index: u32, mine: Mac, ip: IpAddr) -> io::Result<Self> {
        let (tx, seen) = watch::channel(None);
        let publish = move |mac: Option<Mac>| {
            if let Some(mac) = mac {
                tx.send_replace(Some(Seen { at: Instant::now(), mac }));
            }
        };
        let task = match ip {
            IpAddr::V4(v4) => {
                let sock = ArpSocket::open(index)?;
                tokio::spawn(async move {
                    let mut buf = [0u8; 1514];
                    loop {
                        match sock.recv(&mut buf).await {
                            Ok(n) => publish(arp_claim(buf.get(..n).unwrap_or_default(), v4, mine)),
                            Err(e) => {
                                tracing::warn!(error = %e, "watching ARP for the VIP stopped");
                                return;
                            }
                        }
                    }
                })
            }
            IpAddr::V6(v6) => {
                let sock = NdFrameSocket::open(index)?;
                tokio::spawn(async move {
                    let mut buf = [0u8; 1514];
                    loop {
                        match sock.recv(&mut buf).await {
                            Ok(n) => {
                                let frame = ndp::decode_frame(buf.get(..n).unwrap_or_default());
                                publish(frame.and_then(|f| {
                                    nd_claim(f.message, Some(i32::from(f.hop_limit)), v6, mine)
                                }))
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "watching NDP for the VIP stopped");
                                return;
                            }
                        }
                    }
                })
            }
        };
        Ok(Claims { seen, task })
    }

    /// The latest announcement of the VIP by another node; changes on every one.
    pub fn seen(&self) -> watch::Receiver<Option<Seen>> {
        self.seen.clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use ferrolb_proto::l2::arp::{ArpPacket, BROADCAST_MAC, Operation};
    use ferrolb_proto::l2::ndp;

    const MINE: Mac = [2, 0, 0, 0, 0, 1];
    const THEIRS: Mac = [2, 0, 0, 0, 0, 2];

    #[test]
    fn a_gratuitous_arp_from_another_mac_is_a_claim() {
        let vip: Ipv4Addr = "192.0.2.200".parse().unwrap();
        let garp = |mac: Mac| arp::encode_frame(BROADCAST_MAC, mac, &ArpPacket::gratuitous(mac, vip));
        assert_eq!(arp_claim(&garp(THEIRS), vip, MINE), Some(THEIRS));
        assert_eq!(arp_claim(&garp(MINE), vip, MINE), None, "our own announcement");
        assert_eq!(arp_claim(&garp(THEIRS), "192.0.2.201".parse().unwrap(), MINE), None, "another address");
        // The other holder's kernel resolving a client from the VIP.
        let request = ArpPacket {
            operation: Operation::Request,
            sender_mac: THEIRS,
            sender_ip: vip,
            target_mac: [0; 6],
            target_ip: "192.0.2.50".parse().unwrap(),
        };
        assert_eq!(arp_claim(&arp::encode_frame(BROADCAST_MAC, THEIRS, &request), vip, MINE), Some(THEIRS));
        // A client asking for the VIP claims nothing.
        let who_has = ArpPacket { sender_ip: "192.0.2.50".parse().unwrap(), target_ip: vip, ..request };
        assert_eq!(arp_claim(&arp::encode_frame(BROADCAST_MAC, THEIRS, &who_has), vip, MINE), None);
        assert_eq!(arp_claim(&[0u8; 10], vip, MINE), None, "garbage");
    }

    #[test]
    fn an_unsolicited_na_from_another_mac_is_a_claim() {
        let vip: Ipv6Addr = "2001:db8::200".parse().unwrap();
        let na = |mac: Mac| ndp::advertisement(vip, mac, false).to_bytes();
        assert_eq!(nd_claim(&na(THEIRS), Some(255), vip, MINE), Some(THEIRS));
        assert_eq!(nd_claim(&na(THEIRS), None, vip, MINE), Some(THEIRS));
        assert_eq!(nd_claim(&na(MINE), Some(255), vip, MINE), None, "our own announcement");
        assert_eq!(nd_claim(&na(THEIRS), Some(64), vip, MINE), None, "not from the link");
        assert_eq!(nd_claim(&na(THEIRS), Some(255), "2001:db8::201".parse().unwrap(), MINE), None);
        assert_eq!(nd_claim(&[136, 0], Some(255), vip, MINE), None, "garbage");
    }
}
