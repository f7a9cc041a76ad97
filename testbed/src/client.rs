//! What a client sees: its neighbour table, probe streams (ICMP echo, TCP connect) with
//! loss gaps, HTTP.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::netns::Netns;
use crate::{Error, wait};

/// A neighbour-table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// Link-layer address, lower case; None while INCOMPLETE/FAILED.
    pub mac: Option<String>,
    /// Kernel states ("REACHABLE", "STALE", …).
    pub state: Vec<String>,
}

/// The neighbour entry of `addr` on `dev` in `ns`, if the kernel has one.
pub fn neighbour(ns: &Netns, dev: &str, addr: IpAddr) -> Result<Option<Neighbour>, Error> {
    let text = ns.ip(&["-j", "neigh", "show", "to", &addr.to_string(), "dev", dev])?;
    let v: Value =
        serde_json::from_str(text.trim()).map_err(|e| Error::Parse(format!("ip -j neigh: {e}")))?;
    Ok(v.as_array().and_then(|a| a.first()).map(|e| Neighbour {
        mac: e["lladdr"].as_str().map(str::to_lowercase),
        state: e["state"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(String::from))
            .collect(),
    }))
}

/// Waits until `ns` resolves `addr` on `dev` to `mac`.
pub fn wait_neighbour_mac(
    ns: &Netns,
    dev: &str,
    addr: IpAddr,
    mac: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let want = mac.to_lowercase();
    wait::until_value(
        &format!("{} to resolve {addr} to {want}", ns.name()),
        timeout,
        || neighbour(ns, dev, addr),
        |n| n.as_ref().and_then(|n| n.mac.as_deref()) == Some(want.as_str()),
    )?;
    Ok(())
}

/// Result of a probe stream.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    /// Probes sent.
    pub sent: u64,
    /// Replies received.
    pub received: u64,
    /// Interval between probes.
    pub interval: Duration,
    /// Runs of consecutive lost probes, in order.
    pub gaps: Vec<Gap>,
}

/// A run of lost probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// Sequence number of the first lost probe.
    pub first: u64,
    /// Number of probes lost in a row.
    pub lost: u64,
    /// When the first lost probe was sent, from the start of the stream.
    pub at: Duration,
    /// Time from the last answered probe before the gap to the first answered after it,
    /// less one interval: the outage a client saw.
    pub outage: Duration,
}

impl ProbeReport {
    /// Probes without a reply.
    pub fn lost(&self) -> u64 {
        self.sent - self.received
    }

    /// The longest outage, zero when nothing was lost.
    pub fn max_outage(&self) -> Duration {
        self.gaps.iter().map(|g| g.outage).max().unwrap_or_default()
    }
}

struct ProbeState {
    sent_at: Vec<Instant>,
    answered: Vec<bool>,
}

/// ICMP echo probes at a fixed interval from a namespace, each timestamped.
pub struct ProbeStream {
    stop_send: Arc<AtomicBool>,
    stop_recv: Arc<AtomicBool>,
    state: Arc<Mutex<ProbeState>>,
    sender: Option<JoinHandle<()>>,
    receiver: Option<JoinHandle<()>>,
    interval: Duration,
    start: Instant,
}

impl std::fmt::Debug for ProbeStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeStream").field("interval", &self.interval).finish()
    }
}

/// Echo identifier/sequence space is 16 bits; the stream counts on past the wrap.
const SEQ_SPACE: u64 = 1 << 16;

impl ProbeStream {
    /// Starts pinging `target` from `ns` every `interval` (10 ms in the failover tests).
    pub fn start(ns: &Netns, target: IpAddr, interval: Duration) -> Result<Self, Error> {
        let v6 = target.is_ipv6();
        let sock = ns.run(move || -> std::io::Result<Socket> {
            let (dom, proto) =
                if v6 { (Domain::IPV6, Protocol::ICMPV6) } else { (Domain::IPV4, Protocol::ICMPV4) };
            // A ping socket: the kernel fills in the identifier and filters our replies.
            let s = Socket::new(dom, Type::DGRAM, Some(proto))?;
            s.set_read_timeout(Some(Duration::from_millis(50)))?;
            s.connect(&SockAddr::from(SocketAddr::new(target, 0)))?;
            Ok(s)
        })??;
        let recv_sock = sock.try_clone()?;
        let stop_send = Arc::new(AtomicBool::new(false));
        let stop_recv = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(ProbeState { sent_at: Vec::new(), answered: Vec::new() }));
        let start = Instant::now();

        let (stop_s, state_s) = (stop_send.clone(), state.clone());
        let sender = std::thread::spawn(move || {
            let mut next = Instant::now();
            let mut seq: u64 = 0;
            while !stop_s.load(Ordering::Relaxed) {
                let req = echo_request(v6, (seq % SEQ_SPACE) as u16);
                if let Ok(mut st) = state_s.lock() {
                    st.sent_at.push(Instant::now());
                    st.answered.push(false);
                }
                // A send error (no route, no neighbour) is a lost probe like any other.
                let _ = sock.send(&req);
                seq += 1;
                next += interval;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
            }
        });
        let (stop_r, state_r) = (stop_recv.clone(), state.clone());
        let receiver = std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while !stop_r.load(Ordering::Relaxed) {
                let Ok(n) = (&recv_sock).read(&mut buf) else { continue };
                let Some(seq16) = echo_reply_seq(v6, &buf[..n]) else { continue };
                if let Ok(mut st) = state_r.lock() {
                    // The latest probe with this 16-bit sequence number.
                    let len = st.answered.len() as u64;
                    if len == 0 {
                        continue;
                    }
                    let last = len - 1;
                    let base = last - (last % SEQ_SPACE);
                    let mut idx = base + u64::from(seq16);
                    if idx > last {
                        idx = idx.saturating_sub(SEQ_SPACE);
                    }
                    if let Some(a) = st.answered.get_mut(idx as usize) {
                        *a = true;
                    }
                }
            }
        });
        Ok(ProbeStream {
            stop_send,
            stop_recv,
            state,
            sender: Some(sender),
            receiver: Some(receiver),
            interval,
            start,
        })
    }

    /// TCP connection probes: from `ns`, a new connection to `target` every `interval`
    /// (or at once after a slow one), answered when the handshake completes within
    /// `timeout`, then reset. Through kube-proxy the SYN-ACK comes from the backend pod,
    /// so an answer proves the whole path; and unlike a request/response exchange, the
    /// answer returns through the node that took the SYN, so a probe does not straddle
    /// a router moving the address to another node (a connection that did would meet a
    /// node without its conntrack entry — not what a load balancer decides).
    pub fn connect(
        ns: &Netns,
        target: SocketAddr,
        interval: Duration,
        timeout: Duration,
    ) -> Result<Self, Error> {
        let path = ns.path();
        let stop_send = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(ProbeState { sent_at: Vec::new(), answered: Vec::new() }));
        let start = Instant::now();
        let (stop_s, state_s) = (stop_send.clone(), state.clone());
        let (entered_tx, entered_rx) = std::sync::mpsc::channel();
        let sender = std::thread::spawn(move || {
            let entered = crate::netns::enter(&path);
            let ok = entered.is_ok();
            let _ = entered_tx.send(entered);
            if !ok {
                return;
            }
            let mut next = Instant::now();
            while !stop_s.load(Ordering::Relaxed) {
                let idx = match state_s.lock() {
                    Ok(mut st) => {
                        st.sent_at.push(Instant::now());
                        st.answered.push(false);
                        st.answered.len() - 1
                    }
                    Err(_) => return,
                };
                if let Ok(s) = TcpStream::connect_timeout(&target, timeout) {
                    // A reset, not a FIN: no TIME_WAIT piling up over thousands of probes.
                    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                    if let Ok(mut st) = state_s.lock() {
                        st.answered[idx] = true;
                    }
                }
                next = (next + interval).max(Instant::now());
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        entered_rx.recv().map_err(|_| Error::Thread("probe thread died".into()))??;
        Ok(ProbeStream {
            stop_send,
            stop_recv: Arc::new(AtomicBool::new(true)),
            state,
            sender: Some(sender),
            receiver: None,
            interval,
            start,
        })
    }

    /// Probes sent so far and how many were answered.
    pub fn counts(&self) -> (u64, u64) {
        self.state
            .lock()
            .map(|st| (st.sent_at.len() as u64, st.answered.iter().filter(|a| **a).count() as u64))
            .unwrap_or_default()
    }

    /// Waits until `n` more probes than so far have been answered: the path works, and
    /// the report will hold at least `n` answers from here on.
    pub fn wait_answered(&self, n: u64, timeout: Duration) -> Result<(), Error> {
        let base = self.counts().1;
        crate::wait::until_holds(&format!("{n} more answered probes"), timeout, || {
            self.counts().1 >= base + n
        })
    }

    /// Waits until `n` more probes than so far have been sent, answered or not: the
    /// stream has covered `n` intervals from here.
    pub fn wait_sent(&self, n: u64, timeout: Duration) -> Result<(), Error> {
        let base = self.counts().0;
        crate::wait::until_holds(&format!("{n} more probes sent"), timeout, || self.counts().0 >= base + n)
    }

    /// Stops sending, waits `linger` for late replies, and reports.
    pub fn stop(mut self, linger: Duration) -> ProbeReport {
        self.stop_send.store(true, Ordering::Relaxed);
        if let Some(h) = self.sender.take() {
            let _ = h.join();
        }
        std::thread::sleep(linger);
        self.stop_recv.store(true, Ordering::Relaxed);
        if let Some(h) = self.receiver.take() {
            let _ = h.join();
        }
        let st = match self.state.lock() {
            Ok(st) => ProbeState { sent_at: st.sent_at.clone(), answered: st.answered.clone() },
            Err(_) => ProbeState { sent_at: Vec::new(), answered: Vec::new() },
        };
        report(&st, self.interval, self.start)
    }
}

impl Drop for ProbeStream {
    fn drop(&mut self) {
        self.stop_send.store(true, Ordering::Relaxed);
        self.stop_recv.store(true, Ordering::Relaxed);
        for h in [self.sender.take(), self.receiver.take()].into_iter().flatten() {
            let _ = h.join();
        }
    }
}

fn report(st: &ProbeState, interval: Duration, start: Instant) -> ProbeReport {
    let mut gaps = Vec::new();
    let mut i = 0;
    let n = st.answered.len();
    while i < n {
        if st.answered[i] {
            i += 1;
            continue;
        }
        let first = i;
        while i < n && !st.answered[i] {
            i += 1;
        }
        let lost = (i - first) as u64;
        let before = if first > 0 { st.sent_at[first - 1] } else { start };
        let after = if i < n { st.sent_at[i] } else { st.sent_at[n - 1] + interval };
        gaps.push(Gap {
            first: first as u64,
            lost,
            at: st.sent_at[first] - start,
            outage: (after - before).saturating_sub(interval),
        });
    }
    ProbeReport {
        sent: n as u64,
        received: st.answered.iter().filter(|a| **a).count() as u64,
        interval,
        gaps,
    }
}

fn echo_request(v6: bool, seq: u16) -> Vec<u8> {
    let kind = if v6 { 128 } else { 8 };
    let mut m = vec![kind, 0, 0, 0, 0, 0, 0, 0];
    m[6..8].copy_from_slice(&seq.to_be_bytes());
    m.extend_from_slice(b"ferrolb!");
    if !v6 {
        // ICMPv6 checksums are filled in by the kernel; ICMPv4 ping sockets need ours.
        let c = checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
    }
    m
}

fn echo_reply_seq(v6: bool, m: &[u8]) -> Option<u16> {
    let want = if v6 { 129 } else { 0 };
    (m.len() >= 8 && m[0] == want).then(|| u16::from_be_bytes([m[6], m[7]]))
}

fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for chunk in data.chunks(2) {
        let word = u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Fetches `http://addr:port/path` from inside `ns`; returns the body.
pub fn http_get(ns: &Netns, addr: SocketAddr, path: &str, timeout: Duration) -> Result<String, Error> {
    let path = path.to_string();
    ns.run(move || -> Result<String, Error> {
        let mut s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        // One write: `write!` would send each formatted piece as its own segment, and a
        // server that answers after its first read closes with the rest unread (RST).
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)?;
        let (head, body) =
            resp.split_once("\r\n\r\n").ok_or_else(|| Error::Parse(format!("HTTP response: {resp}")))?;
        if !head.starts_with("HTTP/1.") || head.split_whitespace().nth(1).is_none_or(|c| c != "200") {
            return Err(Error::Parse(format!("HTTP status: {head}")));
        }
        Ok(body.to_string())
    })?
}

/// A tiny HTTP server inside a namespace answering every request with a fixed body
/// (which node answered). Stops when dropped.
pub struct HttpServer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpServer")
    }
}

impl HttpServer {
    /// Serves `body` on `bind` inside `ns`.
    pub fn start(ns: &Netns, bind: SocketAddr, body: &str) -> Result<Self, Error> {
        let listener = ns.run(move || -> std::io::Result<TcpListener> {
            let s = Socket::new(Domain::for_address(bind), Type::STREAM, Some(Protocol::TCP))?;
            s.set_reuse_address(true)?;
            // Bind to addresses that are not (yet) configured, like a VIP before takeover.
            if bind.is_ipv4() {
                s.set_freebind_v4(true)?;
            } else {
                s.set_freebind_v6(true)?;
            }
            s.bind(&bind.into())?;
            s.listen(64)?;
            let l: TcpListener = s.into();
            l.set_nonblocking(true)?;
            Ok(l)
        })??;
        let stop = Arc::new(AtomicBool::new(false));
        let (stop2, body) = (stop.clone(), body.to_string());
        let handle = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                        read_request_head(&mut s);
                        let _ = write!(
                            s,
                            "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(HttpServer { stop, handle: Some(handle) })
    }
}

/// Reads until the end of the request head (or 8 KiB, EOF, error or the read timeout),
/// so the answer never races request bytes still arriving: closing a socket with
/// unread data resets the connection.
fn read_request_head(s: &mut TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(buf.get(..n).unwrap_or_default()),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The MACs that answer `arping` for `addr` from `dev` in `ns` (Habets arping,
/// `count` requests): exactly one for an address with a single owner.
pub fn arp_responders(ns: &Netns, dev: &str, addr: IpAddr, count: u32) -> Result<BTreeSet<String>, Error> {
    let out =
        ns.exec_output(&["arping", "-c", &count.to_string(), "-w", "300000", "-i", dev, &addr.to_string()])?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| l.split("bytes from ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(|m| m.to_lowercase())
        .collect())
}

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

/// Every link-layer address that answers `ndisc6` for `addr` on `dev` in `ns`.
pub fn ndp_responders(ns: &Netns, dev: &str, addr: IpAddr) -> Result<BTreeSet<String>, Error> {
    let out = ns.exec_output(&["ndisc6", "-m", "-r", "2", "-w", "500", &addr.to_string(), dev])?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("Target link-layer address:"))
        .map(|m| m.trim().to_lowercase())
        .collect())
}

/// Sends a gratuitous ARP (as a request: sender IP = target IP) for `addr` from `dev`
/// in `ns`, using the Habets arping.
pub fn gratuitous_arp(ns: &Netns, dev: &str, addr: IpAddr) -> Result<(), Error> {
    let a = addr.to_string();
    let argv = ["arping", "-q", "-c", "1", "-U", "-i", dev, "-S", &a, &a];
    let out = ns.exec_output(&argv)?;
    // Exit 1 means "no reply", which is what an unsolicited ARP gets.
    match out.status.code() {
        Some(0 | 1) => Ok(()),
        _ => Err(Error::Command {
            command: argv.join(" "),
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(answered: &[bool], interval: Duration) -> (ProbeState, Instant) {
        let start = Instant::now();
        let sent_at = (0..answered.len()).map(|i| start + interval * i as u32).collect();
        (ProbeState { sent_at, answered: answered.to_vec() }, start)
    }

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

    #[test]
    fn gaps_report_outage_between_answered_probes() {
        let iv = Duration::from_millis(10);
        let (st, start) = state(&[true, true, false, false, false, true, true], iv);
        let r = report(&st, iv, start);
        assert_eq!((r.sent, r.received, r.lost()), (7, 4, 3));
        assert_eq!(r.gaps.len(), 1);
        assert_eq!(r.gaps[0].first, 2);
        assert_eq!(r.gaps[0].lost, 3);
        // last answered at 10 ms, next answered at 50 ms: 30 ms without service.
        assert_eq!(r.gaps[0].outage, Duration::from_millis(30));
    }

    #[test]
    fn no_loss_means_no_gaps() {
        let iv = Duration::from_millis(10);
        let (st, start) = state(&[true; 5], iv);
        let r = report(&st, iv, start);
        assert!(r.gaps.is_empty());
        assert_eq!(r.max_outage(), Duration::ZERO);
    }

    #[test]
    fn echo_request_checksum_verifies() {
        let m = echo_request(false, 7);
        assert_eq!(checksum(&m), 0);
        assert_eq!(echo_reply_seq(false, &[0, 0, 0, 0, 0, 0, 0, 7]), Some(7));
        assert_eq!(echo_reply_seq(true, &[129, 0, 0, 0, 0, 0, 1, 0]), Some(256));
    }
}
