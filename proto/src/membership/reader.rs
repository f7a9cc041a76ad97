//! The membership socket's reader: a thread of its own that opens every datagram,
//! keeps the L2 [`heartbeat`](super::heartbeat) and hands SWIM payloads to the
//! membership task.
//!
//! The heartbeat must tick every 10 ms on a node whose cores are saturated, so it does
//! not share tokio's workers: this thread asks for SCHED_FIFO (priority
//! [`RT_PRIORITY`], CAP_SYS_NICE), else for nice -20, else runs as it is and says so once
//! (`ferrolb_membership_heartbeat_realtime` 0). Each wake-up reads every queued datagram
//! before the heartbeat judges silence, so a beat that waited in the socket while this
//! node was starved still counts — but at most [`BATCH`] datagrams: under a flood the
//! heartbeat still ticks and beats between batches. Datagrams are held to the Nodes'
//! addresses ([`super::peers`]) before they are opened.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use tokio::sync::{mpsc, watch};

use foca::Codec;

use super::auth::{DropReason, KeyRole, Kind, Sealer};
use super::heartbeat::{Cleared, Event, Heartbeats, Input, Message};
use super::peers::Peers;
use super::{MemberId, MembershipKey, MembershipMetrics, Seed};

/// The real-time priority of the reader thread (low among real-time threads: above
/// every normal process, below the kernel's own and any the operator raised).
pub const RT_PRIORITY: i32 = 10;

/// Longest wait when no heartbeat tick is due.
const IDLE_WAIT: Duration = Duration::from_millis(500);

/// Datagrams read per wake-up at most, before the heartbeat ticks: a few hundred
/// microseconds of MAC work, well within a beat interval.
pub const BATCH: usize = 64;

/// What the reader needs; built by [`super::Membership::spawn`].
pub(super) struct Reader {
    pub(super) name: String,
    pub(super) socket: UdpSocket,
    pub(super) sealer: Sealer,
    pub(super) heartbeats: Heartbeats,
    pub(super) metrics: MembershipMetrics,
    /// Opened SWIM payloads for the membership task.
    pub(super) swim: mpsc::Sender<(Vec<u8>, KeyRole)>,
    pub(super) key: watch::Receiver<MembershipKey>,
    /// Whom to beat ([`super::MembershipHandle::set_successors`]).
    pub(super) successors: watch::Receiver<BTreeSet<String>>,
    /// Live members and where they listen, from the membership task.
    pub(super) members: watch::Receiver<BTreeMap<String, SocketAddr>>,
    pub(super) suspected: watch::Sender<BTreeSet<String>>,
    /// Take-over notices received ([`Message::TookOver`]).
    pub(super) taken_over: watch::Sender<u64>,
    /// Late ticks already counted in the metric.
    pub(super) late_reported: u64,
    /// The live members' addresses, copied from `members` when it changes, and the
    /// suspected set last published: the watches' locks are taken only on a change, never
    /// at every tick. A lock held by a thread of normal priority that the scheduler
    /// preempted (the speaker's event loop reading `suspected`) would block this real-time
    /// thread as long (a priority inversion; the lock does not lend its priority).
    pub(super) addresses: BTreeMap<String, SocketAddr>,
    pub(super) published: BTreeSet<String>,
    /// Who may speak, and for whom; replaced from `nodes` when it changes.
    pub(super) peers: Peers,
    /// The Nodes' membership addresses ([`super::MembershipHandle::set_nodes`]).
    pub(super) nodes: watch::Receiver<Vec<Seed>>,
}

/// Stops the reader thread when dropped (and waits for it: the socket is closed when the
/// drop returns).
#[derive(Debug)]
pub(super) struct ReaderGuard {
    waker: UnixStream,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        let _ = self.waker.write_all(&[1]);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Reader {
    /// Starts the thread.
    pub(super) fn spawn(self) -> std::io::Result<ReaderGuard> {
        let (waker, stop) = UnixStream::pair()?;
        let thread =
            std::thread::Builder::new().name("membership-rx".into()).spawn(move || self.run(&stop))?;
        Ok(ReaderGuard { waker, thread: Some(thread) })
    }

    fn run(mut self, mut stop: &UnixStream) {
        let realtime = raise_priority();
        self.metrics.heartbeat_realtime.set(i64::from(realtime == Priority::Realtime));
        if realtime == Priority::Normal && self.heartbeats.config().enabled() {
            tracing::warn!(
                node = %self.name,
                "membership: cannot run the L2 heartbeat at real-time priority or nice -20 (needs CAP_SYS_NICE): \
                 on a node whose CPUs are saturated, beats may come late and a successor may take an address over \
                 for up to the heartbeat hold"
            );
        }
        let mut buf = vec![0u8; 2048];
        loop {
            let now = Instant::now();
            let wait = self.heartbeats.poll_timeout().map_or(IDLE_WAIT, |t| t.saturating_duration_since(now));
            let wait = PollTimeout::try_from(wait.min(IDLE_WAIT)).unwrap_or(PollTimeout::ZERO);
            let mut fds = [
                PollFd::new(self.socket.as_fd(), PollFlags::POLLIN),
                PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            ];
            if let Err(e) = poll(&mut fds, wait)
                && e != nix::errno::Errno::EINTR
            {
                tracing::error!(error = %e, "membership: poll failed; the reader stops");
                return;
            }
            if fds[1].revents().is_some_and(|r| !r.is_empty()) {
                let _ = stop.read(&mut [0u8; 1]);
                return;
            }
            if !self.drain(&mut buf) {
                return;
            }
            self.step(Instant::now());
        }
    }

    /// Reads the queued datagrams, [`BATCH`] at most. False when the membership task is
    /// gone.
    fn drain(&mut self, buf: &mut [u8]) -> bool {
        // Before the datagrams that woke us: they may come from a node just added.
        if self.nodes.has_changed().unwrap_or(false) {
            let nodes = self.nodes.borrow_and_update().clone();
            self.peers.set(&nodes);
        }
        for _ in 0..BATCH {
            match self.socket.recv_from(buf) {
                Ok((n, from)) => {
                    let datagram = buf.get(..n).unwrap_or_default();
                    if !self.on_datagram(from, datagram) {
                        return false;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(error = %e, "membership receive failed");
                    return true;
                }
            }
        }
        true
    }

    fn on_datagram(&mut self, from: SocketAddr, datagram: &[u8]) -> bool {
        if let Err(reason) = self.peers.admit(Instant::now(), from) {
            self.metrics.drop_packet(reason);
            return true;
        }
        match self.sealer.open_kind(&self.name, datagram) {
            Ok((payload, _, Kind::Beat)) => {
                let message = Message::decode(payload);
                let sender = match &message {
                    Some(Message::Beat(n) | Message::Release(n) | Message::TookOver(n)) => n.as_str(),
                    None => "",
                };
                if message.is_some() && !self.peers.speaks_for(from, sender) {
                    self.metrics.drop_packet(DropReason::Impersonation);
                    return true;
                }
                match message {
                    Some(Message::Beat(name)) if name != self.name => {
                        self.metrics.heartbeat_received.inc();
                        self.heartbeats.handle(Instant::now(), Input::Beat(name));
                    }
                    Some(Message::Release(name)) if name != self.name => {
                        self.heartbeats.handle(Instant::now(), Input::Released(name));
                    }
                    Some(Message::TookOver(by)) if by != self.name => {
                        tracing::warn!(node = %self.name, by = %by,
                            "membership: {by} missed this node's heartbeats and took over its addresses; announcing them again");
                        self.taken_over.send_modify(|n| *n += 1);
                    }
                    _ => self.metrics.drop_packet(super::auth::DropReason::Protocol),
                }
                true
            }
            Ok((payload, _, Kind::Swim)) if !self.swim_speaks_for_itself(from, payload) => {
                self.metrics.drop_packet(DropReason::Impersonation);
                true
            }
            Ok((payload, role, Kind::Swim)) => match self.swim.try_send((payload.to_vec(), role)) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::debug!("membership: task behind, datagram dropped");
                    true
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            },
            Err(reason) => {
                self.metrics.drop_packet(reason);
                true
            }
        }
    }

    /// True when the sender named in a SWIM message's header is the node `from` belongs
    /// to, and its identity's address is one of that node's. A header that does not
    /// decode is left to SWIM (which drops it as a protocol error).
    fn swim_speaks_for_itself(&self, from: SocketAddr, payload: &[u8]) -> bool {
        let Ok(header) = foca::PostcardCodec.decode_header(payload) else { return true };
        let src: &MemberId = &header.src;
        self.peers.speaks_for(from, &src.name) && self.peers.speaks_for(src.addr, &src.name)
    }

    /// Follows the handle and the task, ticks, beats, reports.
    fn step(&mut self, now: Instant) {
        if self.key.has_changed().unwrap_or(false) {
            let key = self.key.borrow_and_update().clone();
            // The task counts and logs the change; a bad key fails there the same way.
            let _ = self.sealer.keys().learn(now, key.expose());
        }
        if self.sealer.keys().poll_timeout().is_some_and(|t| t <= now) {
            self.sealer.keys().handle_timeout(now);
        }
        while self.sealer.keys().poll_event().is_some() {}
        if self.members.has_changed().unwrap_or(false) {
            self.addresses = self.members.borrow_and_update().clone();
            let live = self.addresses.keys().cloned().collect();
            self.heartbeats.handle(now, Input::Live(live));
        }
        if self.successors.has_changed().unwrap_or(false) {
            let targets = self.successors.borrow_and_update().clone();
            if self.heartbeats.config().enabled() {
                tracing::info!(node = %self.name, successors = ?targets,
                    "membership: beating the successors of this node's addresses");
            }
            self.heartbeats.handle(now, Input::Targets(targets));
        }
        self.heartbeats.handle(now, Input::Timeout);
        self.beat();
        self.report();
    }

    fn beat(&mut self) {
        let Reader { heartbeats, sealer, socket, addresses, name, metrics, .. } = self;
        let mut out = Outbox { sealer, socket, addresses };
        for to in &heartbeats.poll_release() {
            out.send(to, &Message::Release(name.clone()));
        }
        for to in heartbeats.poll_transmit().into_iter().flatten() {
            if out.send(to, &Message::Beat(name.clone())) {
                metrics.heartbeat_sent.inc();
            }
        }
    }

    /// Tells `member` that this node took its addresses over (it may be alive after all).
    fn tell_taken_over(&mut self, member: &str) {
        let mut out = Outbox { sealer: &mut self.sealer, socket: &self.socket, addresses: &self.addresses };
        out.send(member, &Message::TookOver(self.name.clone()));
    }

    fn report(&mut self) {
        let m = self.metrics.clone();
        let late = self.heartbeats.late_ticks();
        m.heartbeat_late_ticks.inc_by(late.saturating_sub(self.late_reported));
        self.late_reported = late;
        while let Some(e) = self.heartbeats.poll_event() {
            match e {
                Event::Watching(name) => {
                    tracing::info!(node = %self.name, member = %name,
                        "membership: hearing heartbeats from {name}: this node takes over from it within the heartbeat silence if they stop");
                }
                Event::Suspected(name) => {
                    m.heartbeat_suspicions.inc();
                    self.tell_taken_over(&name);
                    tracing::info!(node = %self.name, member = %name, silence = ?self.heartbeats.config().silence(),
                        "membership: no heartbeat from {name}: taking over the addresses this node is successor of");
                }
                Event::Released(name) => {
                    tracing::info!(node = %self.name, member = %name,
                        "membership: {name} no longer beats this node (it is no longer successor of its addresses)");
                }
                Event::Cleared { name, why } => {
                    let reason = match why {
                        Cleared::BeatsResumed => "beats_resumed",
                        Cleared::Expired => "expired",
                        Cleared::Released => "released",
                    };
                    m.heartbeat_cleared(reason);
                    tracing::warn!(node = %self.name, member = %name, reason,
                        "membership: suspicion of {name} ended ({reason}); it is elected again");
                }
            }
        }
        // Compared, not only sent on events: a suspicion also ends silently when SWIM
        // drops the member (a restarted member then joins with a new identity, and a
        // stale suspicion would keep it out of every election).
        let suspected = self.heartbeats.suspected();
        if suspected != self.published {
            self.published.clone_from(&suspected);
            self.suspected.send_replace(suspected);
        }
    }
}

/// What sending a heartbeat message takes, apart from the heartbeat state.
struct Outbox<'a> {
    sealer: &'a mut Sealer,
    socket: &'a UdpSocket,
    addresses: &'a BTreeMap<String, SocketAddr>,
}

impl Outbox<'_> {
    /// Seals and sends one heartbeat message to the live member `name`; false when it
    /// is not live or the send failed.
    fn send(&mut self, name: &str, message: &Message) -> bool {
        let Some(to) = self.addresses.get(name).copied() else { return false };
        let datagram = self.sealer.seal_kind(Kind::Beat, name, &message.encode());
        match self.socket.send_to(&datagram, to) {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(to = %to, error = %e, "membership: heartbeat message not sent");
                false
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Priority {
    Realtime,
    Nice,
    Normal,
}

/// SCHED_FIFO at [`RT_PRIORITY`] for the calling thread, else nice -20, else nothing.
#[allow(unsafe_code)]
fn raise_priority() -> Priority {
    let param = libc::sched_param { sched_priority: RT_PRIORITY };
    // SAFETY: pthread_self is always valid for the calling thread; param outlives the call.
    if unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) } == 0 {
        return Priority::Realtime;
    }
    let who = libc::id_t::try_from(nix::unistd::gettid().as_raw()).unwrap_or(0);
    // SAFETY: plain syscall with integer arguments; a thread id names the calling thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, who, -20) } == 0 {
        return Priority::Nice;
    }
    Priority::Normal
}
