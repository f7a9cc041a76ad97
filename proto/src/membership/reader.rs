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
//!
//! **Nothing on this thread waits for a thread of normal priority.** A real-time thread
//! that blocks on a lock held by a preempted thread waits as long as that thread (the
//! lock lends no priority). So a beat received or sent allocates nothing (the allocator's
//! arena locks are held for milliseconds by the speaker's periodic `malloc_trim`, and by
//! any thread that allocates): datagrams are opened and sealed in buffers kept here,
//! heartbeat messages borrow their names, member names are interned. And this thread
//! writes no log line (the log writer locks stderr, formats into the heap): it puts
//! [`Note`]s in a bounded channel (a ring allocated once; `try_send` takes no lock while
//! nobody waits on the channel, and the notes thread never does: it waits on a pipe)
//! and a thread of normal priority, `membership-log`, writes them. What still allocates
//! here is rare and off the beat: a member's first beat, a suspicion or its end (the
//! suspected set is published), a change of key, targets, members or Nodes, a SWIM
//! payload handed to the task (a few a second).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::time::TimeSpec;
use tokio::sync::{mpsc, watch};

use foca::Codec;

use super::auth::{DropReason, KeyRole, Kind, Sealer};
use super::heartbeat::{Event, Heartbeats, Input, Message};
use super::peers::Peers;
use super::{MemberId, MembershipKey, MembershipMetrics, Seed};

/// The real-time priority of the reader thread (low among real-time threads: above
/// every normal process, below the kernel's own and any the operator raised).
pub const RT_PRIORITY: i32 = 10;

/// Longest wait when no heartbeat tick is due.
const IDLE_WAIT: Duration = Duration::from_millis(500);

/// How long the reader waits for a datagram before the heartbeat's next tick, `due`:
/// to the tick, to the nanosecond ([`IDLE_WAIT`] at most, or when none is due).
///
/// Not in whole milliseconds: `poll(2)`'s timeout rounded a tick less than a millisecond
/// away down to 0, and the reader polled without waiting until the tick came, every tick
/// (every 5 ms by default): an L2 speaker at rest used a fifth of a core (`bench scale
/// --l2`).
fn poll_wait(due: Option<Instant>, now: Instant) -> Duration {
    due.map_or(IDLE_WAIT, |t| t.saturating_duration_since(now)).min(IDLE_WAIT)
}

/// Datagrams read per wake-up at most, before the heartbeat ticks: a few hundred
/// microseconds of MAC work, well within a beat interval.
pub const BATCH: usize = 64;

/// Notes waiting for the notes thread at most; more are dropped (and counted there).
const NOTES: usize = 256;

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
    /// The members' addresses (every member live at some point, at its last address),
    /// merged from `members` when it changes, and the suspected set last published: the watches' locks are taken only on a change, never
    /// at every tick. A lock held by a thread of normal priority that the scheduler
    /// preempted (the speaker's event loop reading `suspected`) would block this real-time
    /// thread as long (a priority inversion; the lock does not lend its priority).
    pub(super) addresses: BTreeMap<String, SocketAddr>,
    /// [`Heartbeats::suspicions_changed`] when `suspected` was last published.
    pub(super) published: u64,
    /// Who may speak, and for whom; replaced from `nodes` when it changes.
    pub(super) peers: Peers,
    /// The Nodes' membership addresses ([`super::MembershipHandle::set_nodes`]).
    pub(super) nodes: watch::Receiver<Vec<Seed>>,
    /// This host's pressure in permille, sampled by the membership task (an atomic: no
    /// lock), and the value last handed to the heartbeat.
    pub(super) pressure: Arc<AtomicU16>,
    pub(super) pressure_fed: u16,
    /// This node's beat thread got neither real-time priority nor nice -20: its beats are
    /// [`Message::SlowBeat`]s (set when the thread starts).
    pub(super) slow: bool,
}

/// What the reader thread has to say, written to the log by the notes thread.
#[derive(Debug)]
enum Note {
    /// The priority the thread got.
    Priority(Priority),
    /// The heartbeat's targets changed.
    Successors(BTreeSet<String>),
    /// A heartbeat event (member names interned: no allocation).
    Event(Event),
    /// A member was suspected after this silence.
    Suspected(Arc<str>, Duration),
    /// A member is watched from now on ([`Event::Watching`]), allowed this silence.
    Watching(Arc<str>, Duration),
    /// A member took this node's addresses over.
    TakenOverBy(String),
    /// A receive failed.
    ReceiveFailed(ErrorKind),
    /// A heartbeat message could not be sent.
    SendFailed(SocketAddr, ErrorKind),
    /// The membership task is behind: a SWIM datagram was dropped.
    SwimBehind,
    /// poll(2) failed: the reader stops.
    PollFailed(nix::errno::Errno),
}

/// The reader's side of the notes: a bounded channel and a pipe that wakes the notes
/// thread (a write(2), no lock).
struct Notes {
    tx: SyncSender<Note>,
    wake: UnixStream,
    /// Notes dropped because the channel was full.
    dropped: Arc<AtomicU64>,
}

impl Notes {
    fn say(&mut self, note: Note) {
        match self.tx.try_send(note) {
            Ok(()) => {
                // A full pipe already wakes the notes thread.
                let _ = self.wake.write(&[1]);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The reader's buffers, reused for every datagram.
struct Buffers {
    receive: Vec<u8>,
    payload: Vec<u8>,
    datagram: Vec<u8>,
}

impl Buffers {
    fn new() -> Self {
        Buffers {
            receive: vec![0u8; 2048],
            payload: Vec::with_capacity(256),
            datagram: Vec::with_capacity(512),
        }
    }
}

/// Stops the reader thread when dropped (and waits for it and for the notes thread: the
/// socket is closed and every note written when the drop returns).
#[derive(Debug)]
pub(super) struct ReaderGuard {
    waker: UnixStream,
    thread: Option<std::thread::JoinHandle<()>>,
    notes: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        let _ = self.waker.write_all(&[1]);
        for t in [self.thread.take(), self.notes.take()].into_iter().flatten() {
            let _ = t.join();
        }
    }
}

impl Reader {
    /// Starts the thread, and the notes thread that logs for it.
    pub(super) fn spawn(self) -> std::io::Result<ReaderGuard> {
        let (waker, stop) = UnixStream::pair()?;
        let (wake, woken) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        let (tx, rx) = sync_channel(NOTES);
        let dropped = Arc::new(AtomicU64::new(0));
        let scribe = Scribe {
            name: self.name.clone(),
            metrics: self.metrics.clone(),
            enabled: self.heartbeats.config().enabled(),
            rx,
            dropped: dropped.clone(),
            seen_dropped: 0,
        };
        let notes =
            std::thread::Builder::new().name("membership-log".into()).spawn(move || scribe.run(woken))?;
        let notes_tx = Notes { tx, wake, dropped };
        let thread = std::thread::Builder::new()
            .name("membership-rx".into())
            .spawn(move || self.run(&stop, notes_tx))?;
        Ok(ReaderGuard { waker, thread: Some(thread), notes: Some(notes) })
    }

    fn run(mut self, mut stop: &UnixStream, mut notes: Notes) {
        let realtime = raise_priority();
        self.slow = realtime == Priority::Normal;
        self.metrics.heartbeat_realtime.set(i64::from(realtime == Priority::Realtime));
        notes.say(Note::Priority(realtime));
        let mut buf = Buffers::new();
        loop {
            let wait = TimeSpec::from_duration(poll_wait(self.heartbeats.poll_timeout(), Instant::now()));
            let mut fds = [
                PollFd::new(self.socket.as_fd(), PollFlags::POLLIN),
                PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            ];
            if let Err(e) = ppoll(&mut fds, Some(wait), None)
                && e != nix::errno::Errno::EINTR
            {
                notes.say(Note::PollFailed(e));
                return;
            }
            if fds[1].revents().is_some_and(|r| !r.is_empty()) {
                let _ = stop.read(&mut [0u8; 1]);
                return;
            }
            let now = match self.drain(&mut buf.receive, &mut notes) {
                Drained::Empty(at) => at,
                Drained::More => Instant::now(),
                Drained::Closed => return,
            };
            self.step(now, &mut buf, &mut notes);
        }
    }

    /// Reads the queued datagrams, [`BATCH`] at most.
    fn drain(&mut self, buf: &mut [u8], notes: &mut Notes) -> Drained {
        // Before the datagrams that woke us: they may come from a node just added.
        if self.nodes.has_changed().unwrap_or(false) {
            let nodes = self.nodes.borrow_and_update().clone();
            self.peers.set(&nodes);
        }
        for _ in 0..BATCH {
            // Taken before the read that finds the socket empty: every datagram that
            // arrived before this instant has been read when it does.
            let before = Instant::now();
            match self.socket.recv_from(buf) {
                Ok((n, from)) => {
                    let datagram = buf.get(..n).unwrap_or_default();
                    if !self.on_datagram(from, datagram, notes) {
                        return Drained::Closed;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Drained::Empty(before),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    notes.say(Note::ReceiveFailed(e.kind()));
                    return Drained::More;
                }
            }
        }
        Drained::More
    }

    /// Opens one datagram. False when the membership task is gone.
    fn on_datagram(&mut self, from: SocketAddr, datagram: &[u8], notes: &mut Notes) -> bool {
        if let Err(reason) = self.peers.admit(Instant::now(), from) {
            self.metrics.drop_packet(reason);
            return true;
        }
        match self.sealer.open_kind(&self.name, datagram) {
            Ok((payload, _, Kind::Beat)) => {
                let Some(message) = Message::decode(payload) else {
                    self.metrics.drop_packet(DropReason::Protocol);
                    return true;
                };
                if !self.peers.speaks_for(from, message.sender()) {
                    self.metrics.drop_packet(DropReason::Impersonation);
                    return true;
                }
                match message {
                    Message::Beat(name) if name != self.name => {
                        self.metrics.heartbeat_received.inc();
                        self.heartbeats.handle(Instant::now(), Input::Beat(name));
                    }
                    Message::SlowBeat(name) if name != self.name => {
                        self.metrics.heartbeat_received.inc();
                        self.heartbeats.handle(Instant::now(), Input::SlowBeat(name));
                    }
                    Message::Release(name) if name != self.name => {
                        self.heartbeats.handle(Instant::now(), Input::Released(name));
                    }
                    Message::TookOver(by) if by != self.name => {
                        self.taken_over.send_modify(|n| *n += 1);
                        notes.say(Note::TakenOverBy(by.to_owned()));
                    }
                    _ => self.metrics.drop_packet(DropReason::Protocol),
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
                    notes.say(Note::SwimBehind);
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

    /// Follows the handle and the task, ticks, beats, reports: `now` is when the socket
    /// was last found empty (silence is judged up to then).
    fn step(&mut self, now: Instant, buf: &mut Buffers, notes: &mut Notes) {
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
            let members = self.members.borrow_and_update().clone();
            let live = members.keys().cloned().collect();
            // Addresses are kept when members leave the live set: a release must reach a
            // member this node's SWIM dropped a moment ago (seen when a partition heals:
            // this node rejoined under a new identity, its view briefly lacked a member
            // it had beaten, the release went nowhere and that member claimed for seconds).
            self.addresses.extend(members);
            self.heartbeats.handle(now, Input::Live(live));
        }
        if self.successors.has_changed().unwrap_or(false) {
            let targets = self.successors.borrow_and_update().clone();
            if self.heartbeats.config().enabled() {
                notes.say(Note::Successors(targets.clone()));
            }
            self.heartbeats.handle(now, Input::Targets(targets));
        }
        let pressure = self.pressure.load(Ordering::Relaxed);
        if pressure != self.pressure_fed {
            self.pressure_fed = pressure;
            self.heartbeats.handle(now, Input::Pressure(pressure));
            self.metrics.heartbeat_silence_multiplier.set(i64::from(self.heartbeats.stretch()));
        }
        self.heartbeats.handle(now, Input::Timeout);
        self.beat(buf, notes);
        self.report(buf, notes);
    }

    fn beat(&mut self, buf: &mut Buffers, notes: &mut Notes) {
        let Reader { heartbeats, sealer, socket, addresses, name, metrics, slow, .. } = self;
        let mut out = Outbox { sealer, socket, addresses, buf, notes };
        // Empty (no allocation) but for the few ticks after a node left the targets.
        for to in &heartbeats.poll_release() {
            out.send(to, Message::Release(name));
        }
        for to in heartbeats.poll_transmit().into_iter().flatten() {
            let beat = if *slow { Message::SlowBeat(name) } else { Message::Beat(name) };
            if out.send(to, beat) {
                metrics.heartbeat_sent.inc();
            }
        }
    }

    fn report(&mut self, buf: &mut Buffers, notes: &mut Notes) {
        let late = self.heartbeats.late_ticks();
        self.metrics.heartbeat_late_ticks.inc_by(late.saturating_sub(self.late_reported));
        self.late_reported = late;
        while let Some(e) = self.heartbeats.poll_event() {
            if let Event::Suspected(name) = &e {
                self.metrics.heartbeat_suspicions.inc();
                let mut out = Outbox {
                    sealer: &mut self.sealer,
                    socket: &self.socket,
                    addresses: &self.addresses,
                    buf,
                    notes,
                };
                // It may be alive after all: it then announces its addresses again.
                out.send(name, Message::TookOver(&self.name));
            }
            match e {
                Event::Suspected(name) => {
                    // The allowance right after the suspicion is the one it was judged by.
                    let silence = self.heartbeats.allowance(Instant::now(), &name).unwrap_or_default();
                    notes.say(Note::Suspected(name, silence));
                }
                Event::Watching(name) => {
                    let silence = self.heartbeats.allowance(Instant::now(), &name).unwrap_or_default();
                    notes.say(Note::Watching(name, silence));
                }
                e => notes.say(Note::Event(e)),
            }
        }
        // Compared, not only sent on events: a suspicion also ends silently when SWIM
        // drops the member (a restarted member then joins with a new identity, and a
        // stale suspicion would keep it out of every election).
        let changed = self.heartbeats.suspicions_changed();
        if changed != self.published {
            self.published = changed;
            self.suspected.send_replace(self.heartbeats.suspected());
        }
    }
}

/// How a drain of the socket ended.
enum Drained {
    /// The socket was found empty at this instant.
    Empty(Instant),
    /// [`BATCH`] datagrams read, or a receive failed: more may be queued.
    More,
    /// The membership task is gone.
    Closed,
}

/// What sending a heartbeat message takes, apart from the heartbeat state.
struct Outbox<'a> {
    sealer: &'a mut Sealer,
    socket: &'a UdpSocket,
    addresses: &'a BTreeMap<String, SocketAddr>,
    buf: &'a mut Buffers,
    notes: &'a mut Notes,
}

impl Outbox<'_> {
    /// Seals and sends one heartbeat message to member `name` (at its last known
    /// address); false when it was never live or the send failed.
    fn send(&mut self, name: &str, message: Message<'_>) -> bool {
        let Some(to) = self.addresses.get(name).copied() else { return false };
        message.encode_into(&mut self.buf.payload);
        self.sealer.seal_kind_into(Kind::Beat, name, &self.buf.payload, &mut self.buf.datagram);
        match self.socket.send_to(&self.buf.datagram, to) {
            Ok(_) => true,
            Err(e) => {
                self.notes.say(Note::SendFailed(to, e.kind()));
                false
            }
        }
    }
}

/// The notes thread: writes what the reader thread has to say, at normal priority.
struct Scribe {
    name: String,
    metrics: MembershipMetrics,
    enabled: bool,
    rx: Receiver<Note>,
    /// Notes the reader dropped (the channel was full), and those already reported.
    dropped: Arc<AtomicU64>,
    seen_dropped: u64,
}

impl Scribe {
    /// Until the reader thread ends (its end of the pipe closes).
    fn run(mut self, mut woken: UnixStream) {
        let mut bytes = [0u8; 64];
        loop {
            let open = loop {
                match woken.read(&mut bytes) {
                    Ok(0) => break false,
                    Ok(_) => break true,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break false,
                }
            };
            while let Ok(note) = self.rx.try_recv() {
                self.write(note);
            }
            let dropped = self.dropped.load(Ordering::Relaxed);
            if dropped != self.seen_dropped {
                tracing::warn!(node = %self.name, dropped = dropped - self.seen_dropped,
                    "membership: the heartbeat thread said more than this thread could write; notes dropped");
                self.seen_dropped = dropped;
            }
            if !open {
                return;
            }
        }
    }

    fn write(&mut self, note: Note) {
        let node = self.name.as_str();
        match note {
            Note::Priority(Priority::Normal) if self.enabled => tracing::warn!(
                node,
                "membership: cannot run the L2 heartbeat at real-time priority or nice -20 (needs CAP_SYS_NICE): \
                 on a node whose CPUs are saturated, beats may come late, so this node says so in its beats and \
                 its successors wait the heartbeat's largest silence before they take over"
            ),
            Note::Priority(p) => {
                tracing::debug!(node, priority = ?p, "membership: heartbeat thread priority")
            }
            Note::Successors(targets) => tracing::info!(node, successors = ?targets,
                "membership: beating the successors of this node's addresses"),
            Note::Watching(name, silence) => tracing::info!(node, member = %name, silence = ?silence,
                "membership: hearing heartbeats from {name}: this node takes over from it within the heartbeat silence if they stop"),
            // Said as `Note::Watching`, with the silence allowed.
            Note::Event(Event::Watching(_)) => {}
            Note::Suspected(name, silence) => tracing::info!(node, member = %name, silence = ?silence,
                "membership: no heartbeat from {name}: taking over the addresses this node is successor of"),
            Note::Event(Event::Suspected(name)) => tracing::info!(node, member = %name,
                "membership: no heartbeat from {name}: taking over the addresses this node is successor of"),
            Note::Event(Event::Released(name)) => tracing::info!(node, member = %name,
                "membership: {name} no longer beats this node (it is no longer successor of its addresses)"),
            Note::Event(Event::Cleared { name, why }) => {
                let reason = why.as_str();
                self.metrics.heartbeat_cleared(reason);
                tracing::warn!(node, member = %name, reason,
                    "membership: suspicion of {name} ended ({reason}); it is elected again");
            }
            Note::TakenOverBy(by) => tracing::warn!(node, by = %by,
                "membership: {by} missed this node's heartbeats and took over its addresses; announcing them again"),
            Note::ReceiveFailed(kind) => tracing::debug!(node, error = %kind, "membership receive failed"),
            Note::SendFailed(to, kind) => {
                tracing::debug!(node, to = %to, error = %kind, "membership: heartbeat message not sent");
            }
            Note::SwimBehind => tracing::debug!(node, "membership: task behind, datagram dropped"),
            Note::PollFailed(e) => {
                tracing::error!(node, error = %e, "membership: poll failed; the reader stops")
            }
        }
    }
}

/// The scheduling the reader thread got.
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

#[cfg(test)]
mod tests;
