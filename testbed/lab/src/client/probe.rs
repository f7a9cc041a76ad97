//! Probe streams from a namespace, each probe timestamped: ICMP echo through a ping
//! socket or TCP connects, reported as runs of lost probes and the outage they made.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::Error;
use crate::netns::Netns;

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

/// Probes each of `targets` from `ns` every 10 ms while `fail` runs, and reports once
/// every stream has 20 more answers than before it: how a failover looked to a client.
pub fn across(
    ns: &Netns,
    targets: &[IpAddr],
    timeout: Duration,
    fail: impl FnOnce(),
) -> Result<Vec<ProbeReport>, Error> {
    let probes: Vec<ProbeStream> = targets
        .iter()
        .map(|t| ProbeStream::start(ns, *t, Duration::from_millis(10)))
        .collect::<Result<_, _>>()?;
    for p in &probes {
        p.wait_sent(30, timeout)?;
    }
    let before: Vec<u64> = probes.iter().map(|p| p.counts().1).collect();
    fail();
    for (p, b) in probes.iter().zip(&before) {
        crate::wait::until_holds("probes to be answered again", timeout, || p.counts().1 >= b + 20)?;
    }
    Ok(probes.into_iter().map(|p| p.stop(Duration::from_millis(100))).collect())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn state(answered: &[bool], interval: Duration) -> (ProbeState, Instant) {
        let start = Instant::now();
        let sent_at = (0..answered.len()).map(|i| start + interval * i as u32).collect();
        (ProbeState { sent_at, answered: answered.to_vec() }, start)
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
