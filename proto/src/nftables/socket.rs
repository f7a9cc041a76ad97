//! The netfilter netlink socket: a batch sent and its answers read, or a dump. Blocking
//! (the kernel answers a batch before `send` returns); async callers run it on a
//! blocking thread. Needs CAP_NET_ADMIN in the network namespace.

use std::io;

use netlink_sys::{Socket, protocols::NETLINK_NETFILTER};
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use super::decode::{self, ChainInfo, Message, NLMSG_DONE};
use super::encode::Batch;
use super::{Family, dump_request};

/// What went wrong talking to nf_tables.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No socket (no nf_tables in this kernel, or no permission).
    #[error("cannot open a netfilter netlink socket: {0}")]
    Open(io::Error),
    /// Sending or receiving failed.
    #[error("netfilter netlink: {0}")]
    Io(io::Error),
    /// The kernel refused the batch; nothing of it was applied.
    #[error("nf_tables refused \"{what}\": {source}")]
    Refused {
        /// The refused message, as `nft` would say it.
        what: String,
        /// The kernel's errno.
        source: io::Error,
    },
    /// The kernel's answer made no sense.
    #[error("nf_tables answered something unreadable: {0}")]
    Malformed(#[from] decode::Malformed),
}

/// How long an answer may take: the kernel answers while `send` runs, so this only
/// bounds a wait that should not happen.
const ANSWER_SECONDS: libc::time_t = 5;

fn open(send_buffer: usize) -> Result<Socket, Error> {
    let mut s = Socket::new(NETLINK_NETFILTER).map_err(Error::Open)?;
    s.bind_auto().map_err(Error::Open)?;
    // Errors quote only the refused message's header, not all of it.
    s.set_cap_ack(true).map_err(Error::Open)?;
    // A batch goes in one datagram; the default buffer holds about 200 kB.
    if send_buffer > 200_000 {
        setsockopt(&s, sockopt::SndBufForce, &send_buffer).map_err(|e| Error::Open(e.into()))?;
    }
    setsockopt(&s, sockopt::ReceiveTimeout, &TimeVal::new(ANSWER_SECONDS, 0))
        .map_err(|e| Error::Open(e.into()))?;
    Ok(s)
}

/// Receives datagrams, handing each message to `each` until it says stop.
fn receive(s: &Socket, mut each: impl FnMut(Message<'_>) -> Result<bool, Error>) -> Result<(), Error> {
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 18);
    loop {
        buf.clear();
        s.recv(&mut buf, 0).map_err(Error::Io)?;
        for m in decode::messages(&buf) {
            if !each(m?)? {
                return Ok(());
            }
        }
    }
}

/// Sends `batch` and waits for the kernel's verdict on it: all of it applied, or none.
pub fn load(batch: &Batch) -> Result<(), Error> {
    let s = open(batch.bytes.len() + 4096)?;
    s.send(&batch.bytes, 0).map_err(Error::Io)?;
    receive(&s, |m| match m.error() {
        Some((0, seq)) => Ok(seq != batch.last()),
        Some((code, seq)) => Err(Error::Refused {
            what: batch.describe(seq).to_owned(),
            source: io::Error::from_raw_os_error(code.saturating_neg()),
        }),
        None => Ok(true),
    })
}

/// Runs a dump of `table`'s chains or rules; an absent table has none.
fn dump<T>(
    rules: bool,
    family: Family,
    table: &str,
    pick: impl Fn(&Message<'_>) -> Option<T>,
) -> Result<Vec<T>, Error> {
    let s = open(0)?;
    s.send(&dump_request(rules, family, table), 0).map_err(Error::Io)?;
    let mut out = Vec::new();
    receive(&s, |m| match m.error() {
        Some((code, _)) if code == -libc::ENOENT => Ok(false),
        Some((code, _)) if code != 0 => Err(Error::Io(io::Error::from_raw_os_error(code.saturating_neg()))),
        _ if m.kind == NLMSG_DONE => Ok(false),
        _ => {
            out.extend(pick(&m));
            Ok(true)
        }
    })?;
    Ok(out)
}

/// The chains of `table`.
pub fn chains(family: Family, table: &str) -> Result<Vec<ChainInfo>, Error> {
    dump(false, family, table, decode::chain)
}

/// Each rule of `table`: its chain and the packets its counters counted.
pub fn rule_packets(family: Family, table: &str) -> Result<Vec<(String, u64)>, Error> {
    dump(true, family, table, decode::rule_packets)
}
