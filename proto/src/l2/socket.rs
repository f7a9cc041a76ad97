//! The two sockets of an interface's responder: AF_PACKET for ARP, raw ICMPv6 for NDP.
//! Both are bound to one interface and driven by tokio through `AsyncFd`.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::AsRawFd;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, SockaddrIn6, recvmsg, sendmsg};
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
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|s| s.get_ref().read(buf)) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
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

/// Registers an owned socket with the tokio reactor.
#[allow(unsafe_code)]
fn register(s: Socket) -> io::Result<AsyncFd<Socket>> {
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

/// A raw ICMPv6 socket on one interface: receives Neighbor Solicitations (with their hop
/// limit), sends advertisements from any source address with hop limit 255.
#[derive(Debug)]
pub struct NdpSocket {
    fd: AsyncFd<Socket>,
    ifindex: u32,
}

/// One received ICMPv6 message.
#[derive(Debug, Clone)]
pub struct Received {
    /// Bytes received.
    pub len: usize,
    /// The sender.
    pub src: Ipv6Addr,
    /// The IPv6 hop limit it arrived with (None if the kernel did not say).
    pub hop_limit: Option<i32>,
}

impl NdpSocket {
    /// Opens the socket bound to interface `name` / `ifindex`.
    pub fn open(name: &str, ifindex: u32) -> io::Result<Self> {
        let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))?;
        s.bind_device(Some(name.as_bytes()))?;
        s.set_multicast_hops_v6(u32::from(ND_HOP_LIMIT))?;
        s.set_unicast_hops_v6(u32::from(ND_HOP_LIMIT))?;
        s.set_multicast_loop_v6(false)?;
        s.set_recv_hoplimit_v6(true)?;
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

    /// Receives one ICMPv6 message (starting at its type byte).
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        loop {
            let mut guard = self.fd.readable().await?;
            let res = guard.try_io(|s| {
                let mut iov = [IoSliceMut::new(buf)];
                let mut cmsg = nix::cmsg_space!(libc::c_int);
                let msg = recvmsg::<SockaddrIn6>(
                    s.get_ref().as_raw_fd(),
                    &mut iov,
                    Some(&mut cmsg),
                    MsgFlags::empty(),
                )
                .map_err(io::Error::from)?;
                let mut hop_limit = None;
                if let Ok(cmsgs) = msg.cmsgs() {
                    for c in cmsgs {
                        if let ControlMessageOwned::Ipv6HopLimit(h) = c {
                            hop_limit = Some(h);
                        }
                    }
                }
                let src = msg.address.map(|a| a.ip()).unwrap_or(Ipv6Addr::UNSPECIFIED);
                Ok(Received { len: msg.bytes, src, hop_limit })
            });
            match res {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
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
