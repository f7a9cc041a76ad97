//! ARP requests for an address at a fixed interval ([`ArpProbes`]): which requests went
//! unanswered, which two nodes answered, and who owned the address over time.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

use crate::Error;
use crate::netns::Netns;

/// ARP requests for an IPv4 address at a fixed interval from a namespace: whether
/// someone answered each one, and who. A new client on the LAN resolves the address at
/// any moment, so a handover must leave no request unanswered, even while the clients
/// that already resolved it keep reaching the old owner.
///
/// Each request names another sender address (taking turns among `senders`), and an
/// answer names the sender it is for: so an answer is matched to its request even when
/// it comes late (a responder on a loaded machine), up to the turn of the same sender
/// again. A request still unanswered then is one a client would have resent after its
/// retransmit time (1 s on Linux).
pub struct ArpProbes {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<ArpReport, Error>>>,
}

/// What [`ArpProbes`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArpReport {
    /// Requests sent.
    pub sent: u64,
    /// When each unanswered request was sent, from the start.
    pub unanswered: Vec<Duration>,
    /// Requests answered by more than one MAC: while two nodes answer (a handover).
    pub answered_twice: u64,
    /// When each of those went out, from the start.
    pub answered_twice_at: Vec<Duration>,
    /// The MACs that answered alone, in order (a run of at least [`OWNER_RUN`] requests
    /// each, repeats merged): the owners over time.
    pub owners: Vec<String>,
}

/// Requests in a row answered by one MAC alone that make it an owner in
/// [`ArpReport::owners`].
pub const OWNER_RUN: usize = 4;

/// One request: when it went out, which sender it named, who answered.
struct ArpRequest {
    at: Duration,
    sender: Ipv4Addr,
    answers: BTreeSet<[u8; 6]>,
}

impl ArpProbes {
    /// Starts asking for `addr` on `dev` from `ns` every `interval`, naming `senders` in
    /// turn (LAN addresses nobody uses; at least one).
    pub fn start(
        ns: &Netns,
        dev: &str,
        addr: Ipv4Addr,
        interval: Duration,
        senders: &[Ipv4Addr],
    ) -> Result<Self, Error> {
        let (ifindex, mac) = link(ns, dev)?;
        let path = ns.path();
        let senders = senders.to_vec();
        if senders.is_empty() {
            return Err(Error::Parse("ArpProbes needs a sender address".into()));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop_t = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || -> Result<ArpReport, Error> {
            let setup = (|| -> Result<_, Error> {
                crate::netns::enter(&path)?;
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                let socket = rt.block_on(async { ferrolb_proto::l2::socket::ArpSocket::open(ifindex) })?;
                Ok((rt, socket))
            })();
            let (rt, socket) = match setup {
                Ok(v) => {
                    let _ = ready_tx.send(Ok(()));
                    v
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return Err(e);
                }
            };
            let requests = rt.block_on(arp_probe_loop(&socket, mac, addr, interval, &senders, &stop_t))?;
            Ok(arp_report(&requests))
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(ArpProbes { stop, thread: Some(thread) }),
            Ok(Err(e)) => Err(Error::Namespace(format!("ARP probes on {dev}: {e}"))),
            Err(_) => Err(Error::Thread("ARP probe thread died".into())),
        }
    }

    /// Stops sending, waits a second for late answers, and reports.
    pub fn stop(mut self) -> Result<ArpReport, Error> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => Err(Error::Thread("ARP probe thread panicked".into())),
        }
    }
}

impl Drop for ArpProbes {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

/// The interface index and MAC of `dev` in `ns`.
fn link(ns: &Netns, dev: &str) -> Result<(u32, [u8; 6]), Error> {
    let text = ns.ip(&["-j", "link", "show", "dev", dev])?;
    let bad = || Error::Parse(format!("ip -j link show dev {dev}: {text}"));
    let v: Value = serde_json::from_str(text.trim()).map_err(|_| bad())?;
    let index = v[0]["ifindex"].as_u64().and_then(|i| u32::try_from(i).ok()).ok_or_else(bad)?;
    let bytes: Vec<u8> = v[0]["address"]
        .as_str()
        .ok_or_else(bad)?
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    Ok((index, bytes.try_into().map_err(|_| bad())?))
}

/// Sends a request every `interval` until `stop`, records the answers, then waits a
/// second for late ones.
async fn arp_probe_loop(
    socket: &ferrolb_proto::l2::socket::ArpSocket,
    mac: [u8; 6],
    addr: Ipv4Addr,
    interval: Duration,
    senders: &[Ipv4Addr],
    stop: &AtomicBool,
) -> Result<Vec<ArpRequest>, Error> {
    use ferrolb_proto::l2::arp::{self, ArpPacket, Operation};
    let start = tokio::time::Instant::now();
    let mut requests: Vec<ArpRequest> = Vec::new();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf = [0u8; 1600];
    let mut linger: Option<tokio::time::Instant> = None;
    loop {
        if linger.is_none() && stop.load(Ordering::Relaxed) {
            linger = Some(tokio::time::Instant::now() + Duration::from_secs(1));
        }
        let until = linger.unwrap_or_else(|| start + Duration::from_secs(86_400));
        tokio::select! {
            _ = tick.tick(), if linger.is_none() => {
                let sender = senders[requests.len() % senders.len()];
                let req = ArpPacket {
                    operation: Operation::Request,
                    sender_mac: mac,
                    sender_ip: sender,
                    target_mac: [0; 6],
                    target_ip: addr,
                };
                requests.push(ArpRequest { at: start.elapsed(), sender, answers: BTreeSet::new() });
                // A send error is an unanswered request like any other.
                let _ = socket.send(&arp::encode_frame([0xff; 6], mac, &req)).await;
            }
            n = socket.recv(&mut buf) => {
                let n = n?;
                let Ok((_, p)) = arp::decode_frame(&buf[..n]) else { continue };
                if p.operation != Operation::Reply || p.sender_ip != addr {
                    continue;
                }
                // The latest request naming this sender.
                if let Some(r) = requests.iter_mut().rev().find(|r| r.sender == p.target_ip) {
                    r.answers.insert(p.sender_mac);
                }
            }
            () = tokio::time::sleep_until(until), if linger.is_some() => return Ok(requests),
        }
    }
}

fn arp_report(requests: &[ArpRequest]) -> ArpReport {
    let mut owners: Vec<String> = Vec::new();
    let mut run: Option<([u8; 6], usize)> = None;
    for r in requests {
        let alone = (r.answers.len() == 1).then(|| r.answers.iter().next().copied()).flatten();
        run = match (run, alone) {
            (Some((m, n)), Some(a)) if m == a => Some((m, n + 1)),
            (_, Some(a)) => Some((a, 1)),
            (_, None) => None,
        };
        if let Some((m, OWNER_RUN)) = run {
            let m = ferrolb_proto::l2::arp::mac_to_string(&m);
            if owners.last() != Some(&m) {
                owners.push(m);
            }
        }
    }
    ArpReport {
        sent: requests.len() as u64,
        unanswered: requests.iter().filter(|r| r.answers.is_empty()).map(|r| r.at).collect(),
        answered_twice: requests.iter().filter(|r| r.answers.len() > 1).count() as u64,
        answered_twice_at: requests.iter().filter(|r| r.answers.len() > 1).map(|r| r.at).collect(),
        owners,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arp_report_counts_unanswered_doubles_and_owners_in_order() {
        let (a, b) = ([0, 0, 0x5e, 0, 0x53, 0x0b], [0, 0, 0x5e, 0, 0x53, 0x0c]);
        let req = |i: u64, macs: &[[u8; 6]]| ArpRequest {
            at: Duration::from_millis(10 * i),
            sender: Ipv4Addr::new(192, 0, 2, 150),
            answers: macs.iter().copied().collect(),
        };
        // a alone, both (a handover), b alone, one unanswered, b, a alone too briefly.
        let mut rs = Vec::new();
        for m in [&[a][..], &[a], &[a], &[a], &[a], &[a, b], &[a, b], &[b], &[b], &[b], &[b], &[], &[b], &[a]]
        {
            rs.push(req(rs.len() as u64, m));
        }
        let r = arp_report(&rs);
        assert_eq!((r.sent, r.answered_twice), (14, 2));
        assert_eq!(r.answered_twice_at, [Duration::from_millis(50), Duration::from_millis(60)]);
        assert_eq!(r.unanswered, [Duration::from_millis(110)]);
        assert_eq!(r.owners, ["00:00:5e:00:53:0b", "00:00:5e:00:53:0c"]);
    }
}
