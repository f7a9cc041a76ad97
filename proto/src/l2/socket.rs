//! The two sockets of an interface's responder: AF_PACKET for ARP, raw ICMPv6 for NDP.
//! Both are bound to one interface and driven by tokio through `AsyncFd`.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::AsRawFd;

use nix::sys::socket::{ControlMessage, MsgFlags, SockaddrIn6, sendmsg};
use socket2::{Domain, Protocol, SockAddr, SockAddrStorage, Socket, Type};
use tokio::io::unix::AsyncFd;

use super::arp::ETHERTYPE_ARP;
use super::ndp::ND_HOP_LIMIT;

/// An AF_PACKET socket receiving and sending whole Ethernet frames of ethertype ARP on
/// one interface.
#[derive(Debug)]
pub struct ArpSocket {
    fd: AsyncFd<Socket>,
}

impl ArpSocket {
    /// Opens the socket on interface `ifindex`.
    pub fn open(ifindex: u32) -> io::Result<Self> {
        // Protocol 0 at creation, ARP at bind: a packet socket created with a protocol
        // already receives, and binding it then waits for an RCU grace period
        // (synchronize_net, ~20 ms) to move its hook: 20 ms of every L2 takeover.
        let s = Socket::new(Domain::PACKET, Type::RAW, None)?;
        s.bind(&link_addr(ifindex, ETHERTYPE_ARP)?)?;
        s.set_nonblocking(true)?;
        Ok(ArpSocket { fd: register(s)? })
    }

    /// Receives one frame (Ethernet header included).
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        recv_frame(&self.fd, buf).await
    }

    /// Sends one frame out of the bound interface.
    pub async fn send(&self, frame: &[u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|s| s.get_ref().write(frame)) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }
}

/// An AF_PACKET socket receiving the Neighbor Solicitations and Advertisements that reach
/// one interface, as whole Ethernet frames ([`super::ndp::decode_frame`]). A raw ICMPv6
/// socket sees only what the kernel delivers locally: a client re-checking a cached entry
/// sends an NS unicast to the service address at the owner's MAC, and where that address
/// is DNATed rather than configured (kube-proxy's iptables and nftables modes) the
/// kernel never delivers it, so the entry failed (MetalLB #2920).
#[derive(Debug)]
pub struct NdFrameSocket {
    fd: AsyncFd<Socket>,
}

/// Ethertype IPv6.
const ETHERTYPE_IPV6: u16 = 0x86dd;

impl NdFrameSocket {
    /// Opens the socket on interface `ifindex`, passing ICMPv6 types 135 and 136 only.
    pub fn open(ifindex: u32) -> io::Result<Self> {
        Self::open_types(ifindex, [super::ndp::TYPE_NS, super::ndp::TYPE_NA])
    }

    /// Opens the socket on interface `ifindex`, passing the two ICMPv6 `types` only
    /// (router solicitations and advertisements, for unnumbered BGP).
    pub fn open_types(ifindex: u32, types: [u8; 2]) -> io::Result<Self> {
        use socket2::SockFilter;
        const LDB: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
        const JEQ: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
        const RET: u16 = 0x06; // BPF_RET | BPF_K
        let only_nd = [
            SockFilter::new(LDB, 0, 0, 14 + 6),  // IPv6 next header
            SockFilter::new(JEQ, 0, 4, 58),      // ICMPv6, else drop
            SockFilter::new(LDB, 0, 0, 14 + 40), // ICMPv6 type
            SockFilter::new(JEQ, 1, 0, u32::from(types[0])),
            SockFilter::new(JEQ, 0, 1, u32::from(types[1])),
            SockFilter::new(RET, 0, 0, 0xffff),
            SockFilter::new(RET, 0, 0, 0),
        ];
        // As ArpSocket: protocol 0 at creation, the filter before the bind, so the
        // socket never queues a frame the filter would refuse.
        let s = Socket::new(Domain::PACKET, Type::RAW, None)?;
        s.attach_filter(&only_nd)?;
        s.bind(&link_addr(ifindex, ETHERTYPE_IPV6)?)?;
        s.set_nonblocking(true)?;
        Ok(NdFrameSocket { fd: register(s)? })
    }

    /// Receives one frame (Ethernet header included).
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        recv_frame(&self.fd, buf).await
    }
}

/// A raw ICMPv6 socket bound to interface `name` that sends neighbour discovery as RFC
/// 4861 wants it (hop limit 255, not looped back) and queues nothing it receives.
pub(crate) fn nd_sender(name: &str) -> io::Result<Socket> {
    let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))?;
    s.bind_device(Some(name.as_bytes()))?;
    s.set_multicast_hops_v6(u32::from(ND_HOP_LIMIT))?;
    s.set_unicast_hops_v6(u32::from(ND_HOP_LIMIT))?;
    s.set_multicast_loop_v6(false)?;
    block_every_icmpv6_type(&s)?;
    Ok(s)
}

/// ICMP6_FILTER blocking every type: a raw ICMPv6 socket otherwise queues every ICMPv6
/// message of the interface (echo, RA, MLD) for a reader that never reads.
#[allow(unsafe_code)]
fn block_every_icmpv6_type(s: &Socket) -> io::Result<()> {
    const SOL_ICMPV6: libc::c_int = 58;
    const ICMP6_FILTER: libc::c_int = 1;
    // A set bit blocks the type (linux/icmpv6.h, struct icmp6_filter).
    let filter = [u32::MAX; 8];
    // SAFETY: the fd is a valid socket; `filter` is a readable struct icmp6_filter of
    // the length given, alive for the call.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            SOL_ICMPV6,
            ICMP6_FILTER,
            filter.as_ptr().cast(),
            libc::socklen_t::try_from(std::mem::size_of_val(&filter)).unwrap_or(32),
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Reads one frame from a packet socket.
async fn recv_frame(fd: &AsyncFd<Socket>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        let mut guard = fd.readable().await?;
        match guard.try_io(|s| s.get_ref().read(buf)) {
            Ok(r) => return r,
            Err(_would_block) => continue,
        }
    }
}

/// Registers an owned socket with the tokio reactor.
#[allow(unsafe_code)]
pub(crate) fn register(s: Socket) -> io::Result<AsyncFd<Socket>> {
    // SAFETY: `Socket` owns its descriptor, closes it only when dropped, and always
    // returns the same one from `as_raw_fd`; the AsyncFd owns the Socket.
    unsafe { AsyncFd::register(s) }.map_err(|e| e.into_parts().1)
}

/// `sockaddr_ll` for binding a packet socket to `ifindex` and `ethertype`.
#[allow(unsafe_code)]
fn link_addr(ifindex: u32, ethertype: u16) -> io::Result<SockAddr> {
    let ifindex = i32::try_from(ifindex).map_err(|_| io::Error::other("interface index out of range"))?;
    let mut storage = SockAddrStorage::zeroed();
    // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_ll (both are C
    // structs of plain integers), and the zeroed storage is a valid sockaddr_ll.
    let sll = unsafe { storage.view_as::<libc::sockaddr_ll>() };
    sll.sll_family = libc::AF_PACKET as libc::c_ushort;
    sll.sll_protocol = ethertype.to_be();
    sll.sll_ifindex = ifindex;
    let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: the storage holds an initialised sockaddr_ll of `len` bytes.
    Ok(unsafe { SockAddr::new(storage, len) })
}

/// A raw ICMPv6 socket on one interface: joins the solicited-node groups (so the
/// interface accepts their frames) and sends from any source address with hop limit 255.
/// It receives nothing: [`NdFrameSocket`] reads what arrives.
#[derive(Debug)]
pub struct NdpSocket {
    fd: AsyncFd<Socket>,
    ifindex: u32,
}

impl NdpSocket {
    /// Opens the socket bound to interface `name` / `ifindex`.
    pub fn open(name: &str, ifindex: u32) -> io::Result<Self> {
        let s = nd_sender(name)?;
        // Answers come from the service address, which need not be configured here.
        s.set_freebind_v6(true)?;
        s.set_nonblocking(true)?;
        Ok(NdpSocket { fd: register(s)?, ifindex })
    }

    /// Joins a multicast group (the solicited-node group of an owned address).
    pub fn join(&self, group: Ipv6Addr) -> io::Result<()> {
        self.fd.get_ref().join_multicast_v6(&group, self.ifindex)
    }

    /// Leaves a multicast group.
    pub fn leave(&self, group: Ipv6Addr) -> io::Result<()> {
        self.fd.get_ref().leave_multicast_v6(&group, self.ifindex)
    }

    /// Sends `msg` from `src` to `dst` out of this interface.
    pub async fn send(&self, src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> io::Result<usize> {
        let info = libc::in6_pktinfo {
            ipi6_addr: libc::in6_addr { s6_addr: src.octets() },
            ipi6_ifindex: self.ifindex,
        };
        let scope = if is_link_scope(dst) { self.ifindex } else { 0 };
        let to = SockaddrIn6::from(SocketAddrV6::new(dst, 0, 0, scope));
        loop {
            let mut guard = self.fd.writable().await?;
            let res = guard.try_io(|s| {
                let iov = [IoSlice::new(msg)];
                let cmsgs = [ControlMessage::Ipv6PacketInfo(&info)];
                sendmsg(s.get_ref().as_raw_fd(), &iov, &cmsgs, MsgFlags::empty(), Some(&to))
                    .map_err(io::Error::from)
            });
            match res {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }
}

fn is_link_scope(a: Ipv6Addr) -> bool {
    a.is_unicast_link_local() || (a.is_multicast() && (a.segments()[0] & 0x000f) <= 2)
}
