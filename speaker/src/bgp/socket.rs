//! TCP sockets for BGP: source address/port, TTL (eBGP direct vs multihop) and TCP
//! MD5 signatures (RFC 2385) on both connecting and listening sockets.
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
    /// TCP MD5 key.
    pub password: Option<Password>,
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
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(128)?;
    TcpListener::from_std(sock.into())
}

/// Applies the TTL to an accepted connection.
pub fn set_stream_ttl(stream: &TcpStream, peer: IpAddr, ttl: u32) -> io::Result<()> {
    set_ttl(&SockRef::from(stream), peer, ttl)
}
