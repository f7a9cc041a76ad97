//! A stand-in local apiserver: an HTTPS server inside a lab namespace, with a test CA
//! made by rcgen, answering its health endpoints `200 ok` or `503` as the test
//! switches it and counting every other request (an apiserver object read); plus an
//! HTTPS client for the lab's client namespace.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;
use crate::netns::{self, Netns};

fn cert_err(e: rcgen::Error) -> Error {
    Error::Command { command: "rcgen".into(), detail: e.to_string() }
}

/// A throw-away certificate authority, like a cluster's /etc/kubernetes/pki/ca.{crt,key}.
#[derive(Debug)]
pub struct TestCa {
    cert_pem: String,
    key: KeyPair,
}

impl TestCa {
    /// A new self-signed CA named `kubernetes`.
    pub fn new() -> Result<Self, Error> {
        let key = KeyPair::generate().map_err(cert_err)?;
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(cert_err)?;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, "kubernetes");
        let cert = p.self_signed(&key).map_err(cert_err)?;
        Ok(TestCa { cert_pem: cert.pem(), key })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA key, PEM.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// Writes `ca.crt` and `ca.key` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), Error> {
        std::fs::write(dir.join("ca.crt"), &self.cert_pem)?;
        std::fs::write(dir.join("ca.key"), self.key_pem())?;
        Ok(())
    }

    /// A serving certificate for `names` (DNS names or IP addresses), as (cert PEM, key PEM).
    pub fn serving_cert(&self, names: &[&str]) -> Result<(String, String), Error> {
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, &self.key).map_err(cert_err)?;
        let key = KeyPair::generate().map_err(cert_err)?;
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut p = CertificateParams::new(names).map_err(cert_err)?;
        p.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        let cert = p.signed_by(&key, &issuer).map_err(cert_err)?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// A client certificate for user `cn`, in group `org` when given (the apiserver reads
    /// an X.509 identity from CN and O), as (cert PEM, key PEM).
    pub fn client_cert(&self, cn: &str, org: Option<&str>) -> Result<(String, String), Error> {
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, &self.key).map_err(cert_err)?;
        let key = KeyPair::generate().map_err(cert_err)?;
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            p.distinguished_name.push(DnType::OrganizationName, o);
        }
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, &issuer).map_err(cert_err)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// The stand-in apiserver; stops when dropped.
///
/// `/readyz`, `/livez` and `/healthz` answer `200 ok` or `503` as the test switches it;
/// any other path is an apiserver *object read*: it is counted
/// ([`HealthServer::object_reads`]) and answered `200` with the server's marker (which
/// node answered). [`HealthServer::set_running`] closes and reopens the listening
/// socket, as a dying and restarting apiserver does (connections are refused meanwhile).
#[derive(Debug)]
pub struct HealthServer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    healthy: AtomicBool,
    running: AtomicBool,
    stop: AtomicBool,
    requests: AtomicU64,
    object_reads: AtomicU64,
    marker: String,
}

impl HealthServer {
    /// Serves HTTPS on `bind` inside `ns` with a certificate for `names` signed by `ca`;
    /// starts healthy, with an empty marker.
    pub fn start(ns: &Netns, bind: SocketAddr, ca: &TestCa, names: &[&str]) -> Result<Self, Error> {
        Self::start_marked(ns, bind, ca, names, "")
    }

    /// Like [`HealthServer::start`], answering object reads with `marker`. An unspecified
    /// IPv6 `bind` (`[::]:6443`) also takes IPv4 connections.
    pub fn start_marked(
        ns: &Netns,
        bind: SocketAddr,
        ca: &TestCa,
        names: &[&str],
        marker: &str,
    ) -> Result<Self, Error> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (cert, key) = ca.serving_cert(names)?;
        let tls_err = |e: String| Error::Command { command: "rustls".into(), detail: e };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| tls_err(e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| tls_err(e.to_string()))?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| tls_err(e.to_string()))?;
        let config = Arc::new(config);
        let shared = Arc::new(Shared {
            healthy: AtomicBool::new(true),
            running: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            object_reads: AtomicU64::new(0),
            marker: marker.to_owned(),
        });
        let path = ns.path();
        let (tx, rx) = std::sync::mpsc::channel();
        let s = shared.clone();
        let thread = std::thread::spawn(move || {
            let first = netns::enter(&path).and_then(|()| listen(bind).map_err(Error::from));
            let mut listener = match first {
                Ok(l) => {
                    let _ = tx.send(Ok(()));
                    Some(l)
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            while !s.stop.load(Ordering::Relaxed) {
                let running = s.running.load(Ordering::Relaxed);
                if !running {
                    listener = None;
                } else if listener.is_none() {
                    listener = listen(bind).ok();
                }
                let Some(l) = &listener else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                match l.accept() {
                    Ok((stream, _)) => {
                        let (s, config) = (s.clone(), config.clone());
                        // One thread per connection: a slow client never holds up the probes.
                        std::thread::spawn(move || {
                            let _ = serve(stream, &config, &s);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        rx.recv().map_err(|_| Error::Thread("health server thread died".into()))??;
        Ok(HealthServer { shared, thread: Some(thread) })
    }

    /// Switches the health answers between `200 ok` and `503`.
    pub fn set_healthy(&self, healthy: bool) {
        self.shared.healthy.store(healthy, Ordering::Relaxed);
    }

    /// `false`: the listening socket is closed (connections refused, as with a dead
    /// apiserver); `true`: it listens again.
    pub fn set_running(&self, running: bool) {
        self.shared.running.store(running, Ordering::Relaxed);
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::Relaxed)
    }

    /// Requests for anything but `/readyz`, `/livez` and `/healthz` so far.
    pub fn object_reads(&self) -> u64 {
        self.shared.object_reads.load(Ordering::Relaxed)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn listen(bind: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(bind), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if bind.is_ipv6() && bind.ip().is_unspecified() {
        s.set_only_v6(false)?;
    }
    s.bind(&bind.into())?;
    s.listen(128)?;
    let l: TcpListener = s.into();
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Whether a request path is a health endpoint (not an object read).
fn is_health_path(path: &str) -> bool {
    let p = path.split('?').next().unwrap_or(path);
    matches!(p, "/readyz" | "/livez" | "/healthz")
}

fn serve(stream: std::net::TcpStream, config: &Arc<rustls::ServerConfig>, s: &Shared) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let conn = rustls::ServerConnection::new(config.clone()).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, stream);
    let mut req = Vec::new();
    let mut buf = [0u8; 512];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
        let n = tls.read(&mut buf)?;
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&req);
    let path = head.split_whitespace().nth(1).unwrap_or("/");
    let answer = if is_health_path(path) {
        if s.healthy.load(Ordering::Relaxed) {
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                .to_string()
        } else {
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 9\r\nConnection: close\r\n\r\nunhealthy"
                .to_string()
        }
    } else {
        s.object_reads.fetch_add(1, Ordering::Relaxed);
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            s.marker.len(),
            s.marker
        )
    };
    tls.write_all(answer.as_bytes())?;
    tls.conn.send_close_notify();
    tls.flush()?;
    s.requests.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A client trusting only `ca`.
fn client_config(ca: &TestCa) -> Result<Arc<rustls::ClientConfig>, Error> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let tls_err = |e: String| Error::Command { command: "rustls".into(), detail: e };
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.cert_pem().as_bytes()) {
        roots.add(c.map_err(|e| tls_err(e.to_string()))?).map_err(|e| tls_err(e.to_string()))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One HTTPS GET of `path` at `addr` from the calling thread's namespace, verifying the
/// certificate for `name` against the client config; returns (status, body).
fn get(
    config: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    name: &str,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String), Error> {
    let server_name = rustls::pki_types::ServerName::try_from(name.to_owned())
        .map_err(|e| Error::Parse(format!("TLS name {name:?}: {e}")))?;
    let tcp = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    let conn = rustls::ClientConnection::new(config.clone(), server_name)
        .map_err(|e| Error::Command { command: "rustls".into(), detail: e.to_string() })?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(tls, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut resp = Vec::new();
    // A peer closing without close_notify still delivered the whole answer here.
    match tls.read_to_end(&mut resp) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !resp.is_empty() => {}
        Err(e) => return Err(e.into()),
    }
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let (head, body) =
        resp.split_once("\r\n\r\n").ok_or_else(|| Error::Parse(format!("HTTP response: {resp:?}")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| Error::Parse(format!("HTTP status line: {head:?}")))?;
    Ok((status, body.to_string()))
}

/// `GET https://addr/path` from inside `ns`, verifying the server for `name` (as
/// kubeadm's certificate: `kubernetes`) against `ca`; the body of a `200` answer.
pub fn fetch(
    ns: &Netns,
    addr: SocketAddr,
    path: &str,
    ca: &TestCa,
    name: &str,
    timeout: Duration,
) -> Result<String, Error> {
    let config = client_config(ca)?;
    let (p, name) = (path.to_owned(), name.to_owned());
    let (status, body) = ns.run(move || get(&config, addr, &name, &p, timeout))??;
    if status != 200 {
        return Err(Error::Parse(format!("https://{addr}{path}: status {status}: {body}")));
    }
    Ok(body)
}

/// Start time of each attempt and its outcome (`None` while in flight).
type Attempts = Arc<Mutex<Vec<(Instant, Option<bool>)>>>;

/// Client-visible availability of an HTTPS endpoint: a GET every `interval` from a
/// namespace, each in its own thread (a hanging attempt never delays the next), each
/// recorded with its start time and whether it got a `200`.
pub struct HttpsProbe {
    stop: Arc<AtomicBool>,
    results: Attempts,
    thread: Option<JoinHandle<()>>,
    interval: Duration,
}

impl std::fmt::Debug for HttpsProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsProbe").field("interval", &self.interval).finish()
    }
}

impl HttpsProbe {
    /// Starts probing `https://addr/path` from `ns` (server verified for `name` against `ca`).
    pub fn start(
        ns: &Netns,
        addr: SocketAddr,
        path: &str,
        ca: &TestCa,
        name: &str,
        interval: Duration,
    ) -> Result<Self, Error> {
        let config = client_config(ca)?;
        let stop = Arc::new(AtomicBool::new(false));
        let results: Attempts = Arc::new(Mutex::new(Vec::new()));
        let (st, res, nspath) = (stop.clone(), results.clone(), ns.path());
        let (path, name) = (path.to_owned(), name.to_owned());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            // Threads spawned from here inherit the namespace.
            if let Err(e) = netns::enter(&nspath) {
                let _ = tx.send(Err(e));
                return;
            }
            let _ = tx.send(Ok(()));
            let mut next = Instant::now();
            while !st.load(Ordering::Relaxed) {
                let i = match res.lock() {
                    Ok(mut r) => {
                        r.push((Instant::now(), None));
                        r.len() - 1
                    }
                    Err(_) => return,
                };
                let (res, config, path, name) = (res.clone(), config.clone(), path.clone(), name.clone());
                std::thread::spawn(move || {
                    let ok = matches!(get(&config, addr, &name, &path, Duration::from_secs(1)), Ok((200, _)));
                    if let Ok(mut r) = res.lock()
                        && let Some(slot) = r.get_mut(i)
                    {
                        slot.1 = Some(ok);
                    }
                });
                next += interval;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
            }
        });
        rx.recv().map_err(|_| Error::Thread("probe thread died".into()))??;
        Ok(HttpsProbe { stop, results, thread: Some(thread), interval })
    }

    /// Attempts started so far and how many got a `200`.
    pub fn counts(&self) -> (u64, u64) {
        self.results
            .lock()
            .map(|r| (r.len() as u64, r.iter().filter(|(_, ok)| *ok == Some(true)).count() as u64))
            .unwrap_or_default()
    }

    /// Attempts that got a `200` among those started at or after `since`.
    pub fn successes_since(&self, since: Instant) -> u64 {
        self.results
            .lock()
            .map(|r| r.iter().filter(|(t, ok)| *t >= since && *ok == Some(true)).count() as u64)
            .unwrap_or_default()
    }

    /// Stops, waits up to `linger` for attempts in flight, and returns the longest
    /// outage seen: from the last successful attempt before a run of failures to the
    /// first successful one after it, less one interval (zero without failures).
    pub fn stop(mut self, linger: Duration) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let deadline = Instant::now() + linger;
        while Instant::now() < deadline
            && self.results.lock().map(|r| r.iter().any(|(_, ok)| ok.is_none())).unwrap_or(false)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let r = self.results.lock().map(|r| r.clone()).unwrap_or_default();
        max_outage(&r, self.interval)
    }
}

impl Drop for HttpsProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The longest run without success, between the successes around it, less one interval.
fn max_outage(r: &[(Instant, Option<bool>)], interval: Duration) -> Duration {
    let mut last_ok: Option<Instant> = None;
    let mut failed_since_ok = false;
    let mut worst = Duration::ZERO;
    for (t, ok) in r {
        if *ok == Some(true) {
            if let Some(prev) = last_ok
                && failed_since_ok
            {
                worst = worst.max((*t - prev).saturating_sub(interval));
            }
            last_ok = Some(*t);
            failed_since_ok = false;
        } else {
            failed_since_ok = true;
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_paths_are_not_object_reads() {
        assert!(is_health_path("/readyz"));
        assert!(is_health_path("/livez?verbose"));
        assert!(!is_health_path("/apis/ferrolb.io/v1alpha1/controlplanevips"));
        assert!(!is_health_path("/"));
    }

    #[test]
    fn outage_spans_the_failed_attempts_between_successes() {
        let iv = Duration::from_millis(10);
        let t0 = Instant::now();
        let at = |i: u32| t0 + iv * i;
        let r: Vec<(Instant, Option<bool>)> = vec![
            (at(0), Some(true)),
            (at(1), Some(true)),
            (at(2), Some(false)),
            (at(3), None),
            (at(4), Some(false)),
            (at(5), Some(true)),
        ];
        // Last success at 10 ms, next at 50 ms: 30 ms without service.
        assert_eq!(max_outage(&r, iv), Duration::from_millis(30));
        assert_eq!(max_outage(&r[..2], iv), Duration::ZERO);
    }
}
