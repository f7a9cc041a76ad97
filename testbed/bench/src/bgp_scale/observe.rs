//! What r1 holds, read cheaply enough to poll every few milliseconds: BIRD's route
//! count over its control socket ([`BirdCtl`]), the kernel's BIRD routes over rtnetlink.
//!
//! BIRD as the speaker fills r1 with 10 000 routes in about 0.1 s, so the reference
//! needs a finer clock than [`ferrolb_lab::wait::until`]'s 50 ms, and polls that fork
//! `ip netns exec birdc` or `ip route` would take CPU from the routers being timed on
//! a 2-core machine.

use std::io::Read;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::bird_ctl::BirdCtl;
use ferrolb_lab::Error;
use ferrolb_lab::netns::Netns;

/// How often [`until`] polls.
pub const POLL: Duration = Duration::from_millis(5);

impl BirdCtl {
    /// Networks in BIRD's tables (`show route count`).
    pub fn route_count(&mut self) -> Result<u64, Error> {
        Ok(super::parse_route_count(&self.command("show route count")?))
    }
}

const AF_INET: u8 = 2;
const NETLINK_ROUTE: i32 = 0;
const AF_NETLINK: i32 = 16;
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
/// The table changed while it was dumped: the counts may be off.
const NLM_F_DUMP_INTR: u16 = 0x10;
const RTPROT_BIRD: u8 = 12;
const RT_TABLE_MAIN: u8 = 254;

/// An rtnetlink socket opened in a namespace (it stays bound to it), counting the IPv4
/// routes BIRD installed in the main table, as `ip -4 route show proto bird` does.
#[derive(Debug)]
pub struct KernelRoutes {
    sock: Socket,
    seq: u32,
}

impl KernelRoutes {
    /// Opens the socket inside `ns`.
    pub fn open(ns: &Netns) -> Result<Self, Error> {
        let sock = ns.run(|| {
            Socket::new(Domain::from(AF_NETLINK), Type::RAW, Some(Protocol::from(NETLINK_ROUTE)))
        })??;
        sock.set_recv_buffer_size(1 << 20)?;
        sock.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(KernelRoutes { sock, seq: 0 })
    }

    /// IPv4 routes of protocol `bird` in the main table.
    pub fn count(&mut self) -> Result<u64, Error> {
        // A dump that raced with changes can count a route twice: dump again.
        loop {
            if let Some(n) = self.dump()? {
                return Ok(n);
            }
        }
    }

    /// One dump; None when the kernel says it was interrupted by a change.
    fn dump(&mut self) -> Result<Option<u64>, Error> {
        self.seq = self.seq.wrapping_add(1);
        // nlmsghdr (len, type, flags, seq, pid) + rtmsg (family and 11 zero bytes).
        let mut req = Vec::with_capacity(28);
        req.extend_from_slice(&28u32.to_ne_bytes());
        req.extend_from_slice(&RTM_GETROUTE.to_ne_bytes());
        req.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        req.extend_from_slice(&self.seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes());
        req.push(AF_INET);
        req.extend_from_slice(&[0; 11]);
        // Unconnected netlink sockets send to the kernel.
        self.sock.send(&req)?;
        let (mut count, mut intr) = (0u64, false);
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let len = (&self.sock).read(&mut buf)?;
            let mut off = 0;
            while off + 16 <= len {
                let h = &buf[off..len];
                let msg_len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
                let kind = u16::from_ne_bytes([h[4], h[5]]);
                let flags = u16::from_ne_bytes([h[6], h[7]]);
                let seq = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
                if msg_len < 16 || msg_len > h.len() {
                    return Err(Error::Parse(format!(
                        "rtnetlink: message of {msg_len} bytes in {}",
                        h.len()
                    )));
                }
                if seq == self.seq {
                    intr |= flags & NLM_F_DUMP_INTR != 0;
                    match kind {
                        NLMSG_DONE => return Ok((!intr).then_some(count)),
                        NLMSG_ERROR => return Err(Error::Parse("rtnetlink: route dump refused".into())),
                        // rtmsg: family, dst_len, src_len, tos, table, protocol, …
                        RTM_NEWROUTE if msg_len >= 28 => {
                            let rt = &h[16..];
                            if rt[0] == AF_INET && rt[4] == RT_TABLE_MAIN && rt[5] == RTPROT_BIRD {
                                count += 1;
                            }
                        }
                        _ => {}
                    }
                }
                // NLMSG_ALIGN: messages start on 4-byte boundaries.
                off += (msg_len + 3) & !3;
            }
        }
    }
}
