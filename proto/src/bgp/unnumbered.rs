//! Unnumbered peering: the router on a link found by its IPv6 router advertisements,
//! and this node made findable by its own (RFC 4861 §4.1, §4.2, §6).
//!
//! A fabric router that peers "unnumbered" (FRR's `neighbor IFNAME interface`) has no
//! configured neighbour address: it sends router advertisements on the link and takes the
//! source of the ones it hears as its peer's address, and the session runs between the
//! two link-local addresses. So [`RouterFinder`] on one interface
//! * sends a router solicitation when it starts, and a router advertisement with router
//!   lifetime 0 (this node is no default router: hosts on the link route nothing through
//!   it) every [`ADVERTISE_EVERY`], and at once when solicited (at most once a second);
//! * takes the source of the advertisements it hears as the router's address
//!   ([`Routers`]): the first one heard is kept while it keeps advertising, so a second
//!   router on the link never moves a running session; one silent for [`FORGET_AFTER`]
//!   is forgotten.
//!
//! Only what RFC 4861 §6.1.2 lets a host believe counts: hop limit 255 (the message was
//! not routed here), a link-local source, code 0, a valid checksum, at least the 16 octets
//! of an advertisement.

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::{Duration, Instant};

use socket2::Socket;
use tokio::io::unix::AsyncFd;
use tokio::sync::watch;

use crate::l2::ndp::{ALL_NODES, ND_HOP_LIMIT, checksum};
use crate::l2::socket::{NdFrameSocket, nd_sender, register};

/// ICMPv6 router solicitation.
pub const TYPE_RS: u8 = 133;
/// ICMPv6 router advertisement.
pub const TYPE_RA: u8 = 134;
/// All-routers link-scope multicast group.
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// How often this node advertises itself on the link.
pub const ADVERTISE_EVERY: Duration = Duration::from_secs(5);
/// How soon an advertisement that could not be sent is tried again.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);
/// A router not heard for this long is forgotten (FRR advertises every 10 s on an
/// unnumbered link).
pub const FORGET_AFTER: Duration = Duration::from_secs(60);

/// A router advertisement from a node that is no default router (lifetime 0, no flags,
/// no options); the kernel fills in the checksum.
pub fn advertisement() -> [u8; 16] {
    let mut m = [0u8; 16];
    m[0] = TYPE_RA;
    m
}

/// A router solicitation (no options); the kernel fills in the checksum.
pub fn solicitation() -> [u8; 8] {
    let mut m = [0u8; 8];
    m[0] = TYPE_RS;
    m
}

/// What an Ethernet frame on the link said, when it is a message to believe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// A router advertised itself from this link-local address.
    Advertisement(Ipv6Addr),
    /// A node asked the routers to advertise.
    Solicitation(Ipv6Addr),
}

/// Reads one Ethernet frame; `None` for anything but a valid RS or RA. Never panics.
pub fn hear(frame: &[u8]) -> Option<Heard> {
    let ip = frame.get(14..)?;
    let header = ip.get(..40)?;
    let (next_header, hop_limit) = (header.get(6)?, header.get(7)?);
    let addr = |r: std::ops::Range<usize>| -> Option<Ipv6Addr> {
        Some(Ipv6Addr::from(<[u8; 16]>::try_from(header.get(r)?).ok()?))
    };
    let (src, dst) = (addr(8..24)?, addr(24..40)?);
    let payload_len = usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?]));
    let msg = ip.get(40..40 + payload_len)?;
    if *next_header != 58 || *hop_limit != ND_HOP_LIMIT || !src.is_unicast_link_local() {
        return None;
    }
    if msg.get(1) != Some(&0) || checksum(src, dst, msg) != 0 {
        return None;
    }
    match *msg.first()? {
        TYPE_RA if msg.len() >= 16 => Some(Heard::Advertisement(src)),
        TYPE_RS if msg.len() >= 8 => Some(Heard::Solicitation(src)),
        _ => None,
    }
}

/// The routers heard on one link, and the one peered with.
#[derive(Debug, Default)]
pub struct Routers {
    /// When each was first and last heard.
    heard: BTreeMap<Ipv6Addr, (Instant, Instant)>,
}

impl Routers {
    /// Router `addr` advertised at `now`.
    pub fn heard(&mut self, now: Instant, addr: Ipv6Addr) {
        self.heard.entry(addr).and_modify(|(_, last)| *last = now).or_insert((now, now));
    }

    /// Forgets the routers silent for [`FORGET_AFTER`] at `now`.
    pub fn expire(&mut self, now: Instant) {
        self.heard.retain(|_, (_, last)| now.saturating_duration_since(*last) < FORGET_AFTER);
    }

    /// The router to peer with: the one heard first among those still advertising.
    pub fn chosen(&self) -> Option<Ipv6Addr> {
        self.heard.iter().min_by_key(|(addr, (first, _))| (*first, **addr)).map(|(a, _)| *a)
    }
}

/// Finds the router on one interface (see the module doc) until dropped.
#[derive(Debug)]
pub struct RouterFinder {
    found: watch::Receiver<Option<SocketAddrV6>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RouterFinder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RouterFinder {
    /// Starts on interface `name`; call within a tokio runtime.
    pub fn spawn(name: &str) -> io::Result<RouterFinder> {
        let ifindex = nix::net::if_::if_nametoindex(name).map_err(io::Error::from)?;
        let listen = NdFrameSocket::open_types(ifindex, [TYPE_RS, TYPE_RA])?;
        let send = advertiser(name)?;
        let (tx, found) = watch::channel(None);
        let name = name.to_owned();
        let task = tokio::spawn(async move {
            if let Err(e) = run(&name, ifindex, &listen, &send, &tx).await {
                tracing::warn!(interface = %name, error = %e, "unnumbered BGP: router discovery stopped");
            }
        });
        Ok(RouterFinder { found, task })
    }

    /// The router found, with the interface as its scope (None while none advertised).
    pub fn found(&self) -> Option<SocketAddrV6> {
        *self.found.borrow()
    }

    /// A receiver of [`RouterFinder::found`].
    pub fn watch(&self) -> watch::Receiver<Option<SocketAddrV6>> {
        self.found.clone()
    }
}

/// A raw ICMPv6 socket on interface `name` that sends with hop limit 255 and receives
/// nothing (the frame socket reads what arrives).
fn advertiser(name: &str) -> io::Result<AsyncFd<Socket>> {
    let s = nd_sender(name)?;
    s.set_nonblocking(true)?;
    register(s)
}

async fn send(socket: &AsyncFd<Socket>, ifindex: u32, to: Ipv6Addr, msg: &[u8]) -> io::Result<()> {
    let to = socket2::SockAddr::from(SocketAddrV6::new(to, 0, 0, ifindex));
    loop {
        let mut guard = socket.writable().await?;
        match guard.try_io(|s| s.get_ref().send_to(msg, &to)) {
            Ok(r) => return r.map(|_| ()),
            Err(_would_block) => continue,
        }
    }
}

async fn run(
    name: &str,
    ifindex: u32,
    listen: &NdFrameSocket,
    socket: &AsyncFd<Socket>,
    tx: &watch::Sender<Option<SocketAddrV6>>,
) -> io::Result<()> {
    let mut routers = Routers::default();
    let mut buf = vec![0u8; 2048];
    // A link that just came up has no usable link-local address until duplicate address
    // detection ends: a send that fails is said once and tried again at the next turn.
    let mut failing = false;
    let say = |failing: &mut bool, r: io::Result<()>| match r {
        Ok(()) => *failing = false,
        Err(e) if !std::mem::replace(failing, true) => {
            tracing::warn!(interface = %name, error = %e, "unnumbered BGP: cannot send on the link yet; trying again");
        }
        Err(_) => {}
    };
    say(&mut failing, send(socket, ifindex, ALL_ROUTERS, &solicitation()).await);
    let mut next_advert = tokio::time::Instant::now();
    let mut answered: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next_advert) => {
                say(&mut failing, send(socket, ifindex, ALL_NODES, &advertisement()).await);
                if routers.chosen().is_none() {
                    say(&mut failing, send(socket, ifindex, ALL_ROUTERS, &solicitation()).await);
                }
                // Until a send works (the link's address still tentative), every second.
                next_advert += if failing { RETRY_EVERY } else { ADVERTISE_EVERY };
                routers.expire(Instant::now());
            }
            n = listen.recv(&mut buf) => {
                let frame = buf.get(..n?).unwrap_or_default();
                match hear(frame) {
                    Some(Heard::Advertisement(from)) => routers.heard(Instant::now(), from),
                    Some(Heard::Solicitation(_))
                        if answered.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) =>
                    {
                        answered = Some(Instant::now());
                        say(&mut failing, send(socket, ifindex, ALL_NODES, &advertisement()).await);
                    }
                    _ => continue,
                }
            }
        }
        let now = routers.chosen().map(|a| SocketAddrV6::new(a, 0, 0, ifindex));
        if tx.send_if_modified(|f| std::mem::replace(f, now) != now) {
            match now {
                Some(at) => {
                    tracing::info!(interface = %name, router = %at.ip(), "unnumbered BGP: router found on the link")
                }
                None => {
                    tracing::warn!(interface = %name, "unnumbered BGP: no router advertises on the link any more")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet frame carrying `msg` from `src` to `dst` with `hops`, checksum set.
    fn frame(src: Ipv6Addr, dst: Ipv6Addr, hops: u8, msg: &[u8]) -> Vec<u8> {
        let mut msg = msg.to_vec();
        let sum = checksum(src, dst, &msg);
        msg[2..4].copy_from_slice(&sum.to_be_bytes());
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        f.extend_from_slice(&[58, hops]);
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(&msg);
        f
    }

    fn ll(last: u16) -> Ipv6Addr {
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, last)
    }

    #[test]
    fn only_link_local_unrouted_valid_messages_count() {
        let ra = advertisement();
        assert_eq!(hear(&frame(ll(1), ALL_NODES, 255, &ra)), Some(Heard::Advertisement(ll(1))));
        assert_eq!(hear(&frame(ll(2), ALL_ROUTERS, 255, &solicitation())), Some(Heard::Solicitation(ll(2))));
        assert_eq!(hear(&frame(ll(1), ALL_NODES, 64, &ra)), None, "routed here: hop limit below 255");
        let global: Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(hear(&frame(global, ALL_NODES, 255, &ra)), None, "not from a link-local address");
        let mut bad = frame(ll(1), ALL_NODES, 255, &ra);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(hear(&bad), None, "checksum");
        assert_eq!(hear(&frame(ll(1), ALL_NODES, 255, &ra[..12])), None, "too short for an RA");
        let mut coded = ra;
        coded[1] = 1;
        assert_eq!(hear(&frame(ll(1), ALL_NODES, 255, &coded)), None, "code must be 0");
        for cut in 0..frame(ll(1), ALL_NODES, 255, &ra).len() {
            let _ = hear(&frame(ll(1), ALL_NODES, 255, &ra)[..cut]);
        }
    }

    #[test]
    fn the_first_router_heard_stays_chosen_until_it_falls_silent() {
        let t0 = Instant::now();
        let mut r = Routers::default();
        assert_eq!(r.chosen(), None);
        r.heard(t0, ll(9));
        r.heard(t0 + Duration::from_secs(1), ll(1));
        assert_eq!(r.chosen(), Some(ll(9)), "a second router does not move the session");
        let t1 = t0 + Duration::from_secs(40);
        r.heard(t1, ll(1));
        r.expire(t1);
        assert_eq!(r.chosen(), Some(ll(9)), "heard 40 s ago: still there");
        let t2 = t0 + FORGET_AFTER;
        r.expire(t2);
        assert_eq!(r.chosen(), Some(ll(1)), "silent for {FORGET_AFTER:?}: forgotten");
        r.expire(t1 + FORGET_AFTER);
        assert_eq!(r.chosen(), None);
    }
}
