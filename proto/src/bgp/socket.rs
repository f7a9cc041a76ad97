//! TCP sockets for BGP: source address/port, TTL (eBGP direct vs multihop), the
//! minimum accepted TTL of GTSM (RFC 5082) and TCP MD5 signatures (RFC 2385) on both
//! connecting and listening sockets.
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// A TCP MD5 key; its Debug and Display never show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a secret (at most 80 bytes are allowed by Linux).
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// Linux `TCP_MD5SIG_MAXKEYLEN`.
const TCP_MD5SIG_MAXKEYLEN: usize = 80;

/// Linux `struct tcp_md5sig` (include/uapi/linux/tcp.h); libc does not export it.
#[repr(C)]
struct TcpMd5Sig {
    tcpm_addr: SockaddrStorage,
    tcpm_flags: u8,
    tcpm_prefixlen: u8,
    tcpm_keylen: u16,
    tcpm_ifindex: libc::c_int,
    tcpm_key: [u8; TCP_MD5SIG_MAXKEYLEN],
}

/// Installs (or with `None`, removes) the MD5 key for `peer` on a socket.
pub fn set_tcp_md5(sock: &impl AsFd, peer: IpAddr, password: Option<&Password>) -> io::Result<()> {
    let key = password.map(|p| p.0.as_bytes()).unwrap_or_default();
    if key.len() > TCP_MD5SIG_MAXKEYLEN {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "TCP MD5 password longer than 80 bytes"));
    }
    let sref = SockRef::from(sock);
    // A dual-stack IPv6 socket sees IPv4 peers as v4-mapped addresses.
    let peer = match (peer, sref.domain()?) {
        (IpAddr::V4(v4), d) if d == Domain::IPV6 => IpAddr::V6(v4.to_ipv6_mapped()),
        (p, _) => p,
    };
    let mut sig = TcpMd5Sig {
        tcpm_addr: SockaddrStorage::of(peer),
        tcpm_flags: 0,
        tcpm_prefixlen: 0,
        tcpm_keylen: key.len() as u16,
        tcpm_ifindex: 0,
        tcpm_key: [0; TCP_MD5SIG_MAXKEYLEN],
    };
    if let Some(k) = sig.tcpm_key.get_mut(..key.len()) {
        k.copy_from_slice(key);
    }
    setsockopt_md5(&sref, &sig)
}

/// `struct __kernel_sockaddr_storage`: 128 bytes, 8-byte aligned, filled by hand so no
/// unsafe cast is needed.
#[repr(C, align(8))]
struct SockaddrStorage([u8; 128]);

impl SockaddrStorage {
    fn of(ip: IpAddr) -> Self {
        let mut b = [0u8; 128];
        // sa_family is native-endian; port stays 0; the address is in network order.
        let (family, off, octets): (u16, usize, Vec<u8>) = match ip {
            IpAddr::V4(a) => (libc::AF_INET as u16, 4, a.octets().to_vec()),
            IpAddr::V6(a) => (libc::AF_INET6 as u16, 8, a.octets().to_vec()),
        };
        if let Some(f) = b.get_mut(..2) {
            f.copy_from_slice(&family.to_ne_bytes());
        }
        if let Some(a) = b.get_mut(off..off + octets.len()) {
            a.copy_from_slice(&octets);
        }
        Self(b)
    }
}

#[allow(unsafe_code)]
fn setsockopt_md5(sock: &SockRef<'_>, sig: &TcpMd5Sig) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `sig` is a valid, initialised `struct tcp_md5sig` that outlives the call,
    // and the length passed is exactly its size; the kernel only reads from it.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            (sig as *const TcpMd5Sig).cast(),
            std::mem::size_of::<TcpMd5Sig>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// How to open an outgoing BGP connection.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Peer address and port.
    pub peer: SocketAddr,
    /// Source address to bind.
    pub local_addr: Option<IpAddr>,
    /// Source port to bind (0 or `None`: ephemeral).
    pub local_port: Option<u16>,
    /// IP TTL / hop limit; `None` leaves the system default.
    pub ttl: Option<u32>,
    /// Least TTL / hop limit accepted from the peer (GTSM, RFC 5082); `None`: any.
    pub min_ttl: Option<u8>,
    /// TCP MD5 key.
    pub password: Option<Password>,
}

/// The TTL GTSM sends with and, for a directly connected peer, requires (RFC 5082 §3).
pub const GTSM_TTL: u8 = 255;

/// Makes the kernel drop the peer's packets that arrive with a TTL (IPv4 peer:
/// `IP_MINTTL`) or hop limit (IPv6 peer: `IPV6_MINHOPCOUNT`) below `min`.
///
/// An IPv4 peer on a dual-stack IPv6 socket takes `IP_MINTTL` too: its packets are
/// IPv4 and checked against that.
pub fn set_min_ttl(sock: &impl AsFd, peer: IpAddr, min: u8) -> io::Result<()> {
    let (level, name) = min_ttl_option(peer);
    setsockopt_int(sock, level, name, libc::c_int::from(min))
}

/// The minimum TTL / hop limit set on a socket for `peer` (0: none).
pub fn min_ttl(sock: &impl AsFd, peer: IpAddr) -> io::Result<u8> {
    let (level, name) = min_ttl_option(peer);
    let v = getsockopt_int(sock, level, name)?;
    u8::try_from(v).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "minimum TTL out of range"))
}

fn min_ttl_option(peer: IpAddr) -> (libc::c_int, libc::c_int) {
    match peer {
        IpAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_MINTTL),
        IpAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_MINHOPCOUNT),
    }
}

#[allow(unsafe_code)]
fn setsockopt_int(
    sock: &impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `value` is a valid c_int that outlives the call, and the length passed is
    // exactly its size; the kernel only reads from it.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_fd().as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[allow(unsafe_code)]
fn getsockopt_bytes(
    sock: &impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut len = libc::socklen_t::try_from(buf.len()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: `buf` is valid and writable for `len` bytes and outlives the call; the
    // kernel writes at most `len` bytes and stores the length written in `len`.
    let rc =
        unsafe { libc::getsockopt(sock.as_fd().as_raw_fd(), level, name, buf.as_mut_ptr().cast(), &mut len) };
    if rc == 0 { Ok((len as usize).min(buf.len())) } else { Err(io::Error::last_os_error()) }
}

#[allow(unsafe_code)]
fn getsockopt_int(sock: &impl AsFd, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    use std::os::fd::AsRawFd;
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid, writable and outlive the call; `len` holds
    // the size of `value`, so the kernel writes at most that many bytes.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_fd().as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 { Ok(value) } else { Err(io::Error::last_os_error()) }
}

fn set_ttl(sock: &SockRef<'_>, peer: IpAddr, ttl: u32) -> io::Result<()> {
    match peer {
        IpAddr::V4(_) => sock.set_ttl_v4(ttl),
        IpAddr::V6(_) => sock.set_unicast_hops_v6(ttl),
    }
}

/// Connects with MD5, TTL and source binding applied before the SYN.
pub async fn connect(opts: &ConnectOptions) -> io::Result<TcpStream> {
    let domain = Domain::for_address(opts.peer);
    let sock = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nonblocking(true)?;
    sock.set_tcp_nodelay(true)?;
    if opts.password.is_some() {
        set_tcp_md5(&sock, opts.peer.ip(), opts.password.as_ref())?;
    }
    if let Some(ttl) = opts.ttl {
        set_ttl(&SockRef::from(&sock), opts.peer.ip(), ttl)?;
    }
    // Before the SYN, so that a SYN-ACK from further away is already dropped.
    if let Some(min) = opts.min_ttl {
        set_min_ttl(&sock, opts.peer.ip(), min)?;
    }
    if opts.local_addr.is_some() || opts.local_port.is_some() {
        let ip = opts.local_addr.unwrap_or(match opts.peer {
            SocketAddr::V4(_) => IpAddr::from([0, 0, 0, 0]),
            SocketAddr::V6(_) => IpAddr::from([0u16; 8]),
        });
        if opts.local_port.is_some_and(|p| p != 0) {
            sock.set_reuse_address(true)?;
        }
        sock.bind(&SocketAddr::new(ip, opts.local_port.unwrap_or(0)).into())?;
    }
    let std_stream: std::net::TcpStream = sock.into();
    TcpSocket::from_std_stream(std_stream).connect(opts.peer).await
}

/// Binds a listening socket (with SO_REUSEADDR, so restarts can rebind at once).
///
/// Its TTL / hop limit is 255, which the SYN-ACK carries: a GTSM router (RFC 5082)
/// drops anything less, and before `accept` nobody knows which peer is connecting.
/// Each accepted connection then gets its own peer's TTL ([`set_stream_ttl`]). The
/// listener is shared by peers with and without GTSM, so it cannot drop low-TTL
/// packets itself; it keeps every connection's SYN (`TCP_SAVE_SYN`) instead, whose
/// TTL [`set_stream_ttl`] checks.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let domain = Domain::for_address(addr);
    let sock = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    // A dual-stack IPv6 socket answers IPv4 peers with the IPv4 TTL.
    sock.set_ttl_v4(u32::from(GTSM_TTL))?;
    if domain == Domain::IPV6 {
        sock.set_unicast_hops_v6(u32::from(GTSM_TTL))?;
    }
    setsockopt_int(&sock, libc::IPPROTO_TCP, libc::TCP_SAVE_SYN, 1)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(128)?;
    TcpListener::from_std(sock.into())
}

/// The TTL (IPv6: hop limit) of the SYN that opened an accepted connection, when its
/// listener kept it (`TCP_SAVE_SYN`); it can be read once.
pub fn syn_ttl(stream: &impl AsFd) -> io::Result<Option<u8>> {
    let mut buf = [0u8; 512];
    let len = getsockopt_bytes(stream, libc::IPPROTO_TCP, libc::TCP_SAVED_SYN, &mut buf)?;
    let header = buf.get(..len).unwrap_or_default();
    // The saved SYN starts with its IP header: IPv4 TTL at byte 8, IPv6 hop limit at 7.
    Ok(match header.first().map(|b| b >> 4) {
        Some(4) => header.get(8).copied(),
        Some(6) => header.get(7).copied(),
        _ => None,
    })
}

/// Applies a peer's TTL (`None`: the system default, not the listener's 255) and
/// minimum accepted TTL (GTSM) to a connection accepted from it.
///
/// With a minimum, a connection whose SYN came with less is refused (an error of kind
/// `PermissionDenied`): the kernel checks only the packets that arrive after the
/// option is set, and the peer's OPEN may already be queued by then.
pub fn set_stream_ttl(
    stream: &TcpStream,
    peer: IpAddr,
    ttl: Option<u32>,
    min_ttl: Option<u8>,
) -> io::Result<()> {
    match ttl {
        Some(ttl) => set_ttl(&SockRef::from(stream), peer, ttl)?,
        // Linux: -1 restores the route's default.
        None => match peer {
            IpAddr::V4(_) => setsockopt_int(stream, libc::IPPROTO_IP, libc::IP_TTL, -1)?,
            IpAddr::V6(_) => setsockopt_int(stream, libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, -1)?,
        },
    }
    if let Some(min) = min_ttl {
        set_min_ttl(stream, peer, min)?;
        if let Some(syn) = syn_ttl(stream)?
            && syn < min
        {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("its SYN arrived with TTL {syn}, below the {min} GTSM (ttlSecurity) requires"),
            ));
        }
    }
    Ok(())
}
