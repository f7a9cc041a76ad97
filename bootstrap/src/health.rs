//! The health monitor: probes the local apiserver and says whether this node may announce.
//!
//! [`Monitor`] is the pure state machine (thresholds, probe schedule) driven with `now`;
//! [`Prober`] does one HTTP(S) GET; [`run`] ties them together on a tokio task.
//!
//! Thresholds: `failureThreshold` consecutive failures turn a healthy node unhealthy;
//! [`SUCCESS_THRESHOLD`] consecutive successes turn an unhealthy node healthy. A node
//! starts unhealthy: it announces nothing before its apiserver answered.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::HealthCheck;
use rustls::pki_types::ServerName;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// Consecutive successes before an unhealthy node counts as healthy again: two, so one
/// lucky answer from an apiserver that is still starting or flapping does not pull the
/// VIP back (the cost is one interval of delay, 1 s by default).
pub const SUCCESS_THRESHOLD: u32 = 2;

/// What the monitor learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// A probe handed out by [`Monitor::poll_transmit`] ended: it started at `started`
    /// (the next one is due an interval after that) and `ok` says it got a 200.
    Probed {
        /// When the probe started.
        started: Instant,
        /// Whether it succeeded.
        ok: bool,
    },
    /// [`Monitor::poll_timeout`] passed: the next probe is due.
    Timeout,
}

/// One GET of the health check URL, to run now (see [`Monitor::poll_transmit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe;

/// The health state machine, sans IO: driven by [`Monitor::handle`], drained by
/// [`Monitor::poll_transmit`] (a probe to run), [`Monitor::poll_event`] (health changed) and
/// [`Monitor::poll_timeout`] (when to call `handle(now, Input::Timeout)`).
#[derive(Debug, Clone)]
pub struct Monitor {
    interval: Duration,
    failure_threshold: u32,
    success_threshold: u32,
    healthy: bool,
    successes: u32,
    failures: u32,
    /// When the next probe is due; None while one is pending or running.
    next_probe: Option<Instant>,
    /// A probe to hand out.
    probe: bool,
    change: Option<bool>,
}

impl Monitor {
    /// A monitor that starts unhealthy with its first probe to run at once.
    pub fn new(interval: Duration, failure_threshold: u32, success_threshold: u32) -> Self {
        Self {
            interval,
            failure_threshold: failure_threshold.max(1),
            success_threshold: success_threshold.max(1),
            healthy: false,
            successes: 0,
            failures: 0,
            next_probe: None,
            probe: true,
            change: None,
        }
    }

    /// Whether this node may announce.
    pub fn is_healthy(&self) -> bool {
        self.healthy
    }

    /// Processes one input at `now`.
    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Timeout => {
                if self.next_probe.is_some_and(|at| now >= at) {
                    self.next_probe = None;
                    self.probe = true;
                }
            }
            Input::Probed { started, ok } => {
                self.next_probe = Some(started + self.interval);
                self.probed(ok);
            }
        }
    }

    fn probed(&mut self, ok: bool) {
        if ok {
            self.failures = 0;
            self.successes = self.successes.saturating_add(1);
            if !self.healthy && self.successes >= self.success_threshold {
                self.healthy = true;
                self.change = Some(true);
            }
        } else {
            self.successes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.healthy && self.failures >= self.failure_threshold {
                self.healthy = false;
                self.change = Some(false);
            }
        }
    }

    /// The probe to run now, if one is due.
    pub fn poll_transmit(&mut self) -> Option<Probe> {
        std::mem::take(&mut self.probe).then_some(Probe)
    }

    /// The new health, once after it changed (call after every [`Monitor::handle`]).
    pub fn poll_event(&mut self) -> Option<bool> {
        self.change.take()
    }

    /// When to call `handle(now, Input::Timeout)` next (`None`: a probe is to run or
    /// running).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_probe
    }
}

/// Why a probe failed; logged on state changes.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The URL is not `http(s)://host[:port]/path`.
    #[error("cannot probe {0:?}: not an http(s) URL")]
    Url(String),
    /// The CA file could not be read or holds no certificate.
    #[error("healthCheck.caFile {file}: {detail}")]
    Ca {
        /// The file.
        file: String,
        /// What went wrong.
        detail: String,
    },
    /// Connecting, TLS or HTTP failed.
    #[error("{0}")]
    Io(String),
    /// The server answered something else than 200.
    #[error("status {0}")]
    Status(u16),
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// The pieces of a probe URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// https or http.
    pub tls: bool,
    /// Host as written (IP without brackets, or a name).
    pub host: String,
    /// Port (default 443 / 80).
    pub port: u16,
    /// Path and query, at least `/`.
    pub path: String,
}

/// Parses `http(s)://host[:port][/path]`.
pub fn parse_url(url: &str) -> Result<Target, ProbeError> {
    let bad = || ProbeError::Url(url.to_owned());
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(bad());
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(bad)?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if after.is_empty() => default_port,
            None => return Err(bad()),
        };
        (h.to_owned(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), p.parse().map_err(|_| bad())?),
            None => (authority.to_owned(), default_port),
        }
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok(Target { tls, host, port, path: path.to_owned() })
}

/// The TLS name checked against the apiserver certificate. kubeadm's apiserver serving
/// certificate names `kubernetes`, `kubernetes.default…`, the node name, the service IP
/// and the advertise address, but not 127.0.0.1; so for a loopback IP we connect to the
/// IP and verify the certificate for `loopback_name` (default `kubernetes`, always in
/// kubeadm's SANs), still against the cluster CA. Other hosts are verified as written.
pub fn server_name(host: &str, loopback_name: &str) -> Result<ServerName<'static>, ProbeError> {
    let name = match host.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() => loopback_name.to_owned(),
        Ok(ip) => return Ok(ServerName::IpAddress(ip.into())),
        Err(_) if host.eq_ignore_ascii_case("localhost") => loopback_name.to_owned(),
        Err(_) => host.to_owned(),
    };
    ServerName::try_from(name.clone()).map_err(|_| ProbeError::Url(format!("bad TLS name {name:?}")))
}

/// TLS settings of a prober; the CA is (re)read until it loads, so a node whose
/// cluster CA does not exist yet (before `kubeadm init`) just counts as unhealthy.
enum Tls {
    Plain,
    Ready(Arc<rustls::ClientConfig>, ServerName<'static>),
    PendingCa(String, ServerName<'static>),
}

/// One configured prober.
pub struct Prober {
    target: Target,
    timeout: Duration,
    tls: std::sync::Mutex<Tls>,
}

impl std::fmt::Debug for Prober {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prober").field("target", &self.target).field("timeout", &self.timeout).finish()
    }
}

impl Prober {
    /// A prober for `hc`; a bad URL fails now, a CA file that cannot be read yet fails
    /// each probe (naming the file) until it can.
    pub fn new(hc: &HealthCheck, loopback_name: &str) -> Result<Self, ProbeError> {
        let target = parse_url(&hc.url)?;
        let timeout = hc.timeout().map(|d| d.std()).unwrap_or(Duration::from_secs(1));
        let tls = if !target.tls {
            Tls::Plain
        } else {
            let name = server_name(&target.host, loopback_name)?;
            if hc.insecure_skip_verify {
                Tls::Ready(Arc::new(insecure_config(&target)?), name)
            } else {
                match ca_config(&hc.ca_file) {
                    Ok(c) => Tls::Ready(Arc::new(c), name),
                    Err(_) => Tls::PendingCa(hc.ca_file.clone(), name),
                }
            }
        };
        Ok(Self { target, timeout, tls: std::sync::Mutex::new(tls) })
    }

    /// The TLS config to use now, loading a pending CA; `None` for plain HTTP.
    fn tls(&self) -> Result<Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>, ProbeError> {
        let mut tls = self.tls.lock().map_err(|_| ProbeError::Io("prober lock poisoned".into()))?;
        if let Tls::PendingCa(file, name) = &*tls {
            let config = ca_config(file)?;
            *tls = Tls::Ready(Arc::new(config), name.clone());
        }
        Ok(match &*tls {
            Tls::Ready(c, n) => Some((c.clone(), n.clone())),
            _ => None,
        })
    }

    /// One GET; Ok only for status 200.
    pub async fn probe(&self) -> Result<(), ProbeError> {
        let tls = self.tls()?;
        match tokio::time::timeout(self.timeout, self.get(tls)).await {
            Ok(r) => r,
            Err(_) => Err(ProbeError::Timeout(self.timeout)),
        }
    }

    async fn get(
        &self,
        tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    ) -> Result<(), ProbeError> {
        let io = |e: std::io::Error| ProbeError::Io(e.to_string());
        let addr = match self.target.host.parse::<IpAddr>() {
            Ok(ip) => std::net::SocketAddr::new(ip, self.target.port),
            Err(_) => tokio::net::lookup_host((self.target.host.as_str(), self.target.port))
                .await
                .map_err(io)?
                .next()
                .ok_or_else(|| ProbeError::Io(format!("{} does not resolve", self.target.host)))?,
        };
        let tcp = TcpStream::connect(addr).await.map_err(io)?;
        let host = if self.target.host.contains(':') {
            format!("[{}]", self.target.host)
        } else {
            self.target.host.clone()
        };
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: ferrolb-bootstrap\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            self.target.path, self.target.port
        );
        let head = match tls {
            Some((config, name)) => {
                let connector = tokio_rustls::TlsConnector::from(config);
                let mut s = connector.connect(name, tcp).await.map_err(io)?;
                s.write_all(request.as_bytes()).await.map_err(io)?;
                read_head(&mut s).await.map_err(io)?
            }
            None => {
                let mut s = tcp;
                s.write_all(request.as_bytes()).await.map_err(io)?;
                read_head(&mut s).await.map_err(io)?
            }
        };
        let status = parse_status(&head).ok_or_else(|| ProbeError::Io("not an HTTP answer".into()))?;
        if status == 200 { Ok(()) } else { Err(ProbeError::Status(status)) }
    }
}

async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    // The status line is all we need; stop at the first line end or 4 KiB.
    while !buf.contains(&b'\n') && buf.len() < 4096 {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(buf)
}

/// The status code of an HTTP/1.x answer.
pub fn parse_status(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client config trusting only the certificates of `ca_file`.
pub fn ca_config(ca_file: &str) -> Result<rustls::ClientConfig, ProbeError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let ca_err = |detail: String| ProbeError::Ca { file: ca_file.to_owned(), detail };
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_file).map_err(|e| ca_err(e.to_string()))?;
    for c in certs {
        let c = c.map_err(|e| ca_err(e.to_string()))?;
        roots.add(c).map_err(|e| ca_err(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(ca_err("holds no certificate".into()));
    }
    rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ca_err(e.to_string()))
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
}

fn insecure_config(target: &Target) -> Result<rustls::ClientConfig, ProbeError> {
    // The validator allows this for loopback URLs only; check again, it is cheap.
    let loopback = target.host.eq_ignore_ascii_case("localhost")
        || target.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(ProbeError::Url(format!(
            "insecureSkipVerify is allowed only for loopback URLs, not {}",
            target.host
        )));
    }
    let p = provider();
    let b = rustls::ClientConfig::builder_with_provider(p.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ProbeError::Io(e.to_string()))?;
    Ok(b.dangerous().with_custom_certificate_verifier(Arc::new(NoVerify(p))).with_no_client_auth())
}

/// Accepts any certificate (loopback URLs with `insecureSkipVerify` only).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Probes forever on the monitor's schedule, publishing health on `tx` and into `metrics`;
/// logs one line per change with the last probe error.
pub async fn run(
    prober: Prober,
    mut monitor: Monitor,
    tx: watch::Sender<bool>,
    metrics: Arc<crate::metrics::Metrics>,
) {
    metrics.healthy.set(0);
    loop {
        while let Some(Probe) = monitor.poll_transmit() {
            let started = Instant::now();
            let result = prober.probe().await;
            metrics.probe_finished(tokio::time::Instant::now(), result.is_ok());
            monitor.handle(Instant::now(), Input::Probed { started, ok: result.is_ok() });
            if let Some(healthy) = monitor.poll_event() {
                metrics.healthy.set(i64::from(healthy));
                match &result {
                    Ok(()) => tracing::info!(healthy, "local apiserver is healthy"),
                    Err(e) => tracing::warn!(healthy, error = %e, "local apiserver is unhealthy"),
                }
                tx.send_replace(healthy);
            } else if let Err(e) = &result {
                tracing::debug!(error = %e, "health probe failed");
            }
        }
        // Never None: a monitor hands out a probe or schedules the next one.
        ferrolb_proto::time::sleep_until(monitor.poll_timeout()).await;
        monitor.handle(Instant::now(), Input::Timeout);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Drives the monitor through a sequence of probe results on a simulated clock.
    fn drive(monitor: &mut Monitor, start: Instant, results: &[bool]) -> Vec<(Duration, bool)> {
        let mut now = start;
        let mut changes = Vec::new();
        for ok in results {
            if let Some(at) = monitor.poll_timeout() {
                now = at;
                monitor.handle(now, Input::Timeout);
            }
            assert_eq!(monitor.poll_transmit(), Some(Probe), "a probe is due");
            monitor.handle(now, Input::Probed { started: now, ok: *ok });
            if let Some(h) = monitor.poll_event() {
                changes.push((now - start, h));
            }
        }
        changes
    }

    #[test]
    fn starts_unhealthy_and_needs_success_threshold() {
        let mut g = Monitor::new(Duration::from_secs(1), 3, 2);
        assert!(!g.is_healthy());
        assert_eq!(g.poll_timeout(), None, "first probe at once");
        let t0 = Instant::now();
        let changes = drive(&mut g, t0, &[true, true]);
        assert_eq!(changes, vec![(Duration::from_secs(1), true)]);
        assert!(g.is_healthy());
    }

    #[test]
    fn failure_threshold_consecutive_failures_turn_it_unhealthy() {
        let mut g = Monitor::new(Duration::from_millis(500), 3, 2);
        let t0 = Instant::now();
        // Healthy at t=0.5s; two failures and a success reset the count; three in a row trip.
        let changes = drive(&mut g, t0, &[true, true, false, false, true, false, false, false]);
        assert_eq!(changes, vec![(Duration::from_millis(500), true), (Duration::from_millis(3500), false)]);
    }

    #[test]
    fn an_isolated_success_does_not_bring_it_back() {
        let mut g = Monitor::new(Duration::from_secs(1), 1, 2);
        let t0 = Instant::now();
        let changes = drive(&mut g, t0, &[true, true, false, true, false, true, true]);
        assert_eq!(
            changes,
            vec![
                (Duration::from_secs(1), true),
                (Duration::from_secs(2), false),
                (Duration::from_secs(6), true)
            ]
        );
    }

    #[test]
    fn probes_are_spaced_by_the_interval() {
        let mut g = Monitor::new(Duration::from_secs(2), 3, 2);
        let t0 = Instant::now();
        assert_eq!(g.poll_transmit(), Some(Probe));
        g.handle(t0, Input::Probed { started: t0, ok: true });
        assert_eq!(g.poll_timeout(), Some(t0 + Duration::from_secs(2)));
    }

    #[test]
    fn urls_parse() {
        assert_eq!(
            parse_url("https://127.0.0.1:6443/readyz").unwrap(),
            Target { tls: true, host: "127.0.0.1".into(), port: 6443, path: "/readyz".into() }
        );
        assert_eq!(
            parse_url("https://[::1]:6443/livez?verbose").unwrap(),
            Target { tls: true, host: "::1".into(), port: 6443, path: "/livez?verbose".into() }
        );
        assert_eq!(parse_url("http://localhost").unwrap().port, 80);
        assert!(parse_url("ftp://x").is_err());
        assert!(parse_url("https://:1/").is_err());
        assert!(parse_url("https://[::1/").is_err());
    }

    #[test]
    fn loopback_hosts_are_verified_as_the_kubernetes_name() {
        assert_eq!(
            server_name("127.0.0.1", "kubernetes").unwrap(),
            ServerName::try_from("kubernetes").unwrap()
        );
        assert_eq!(server_name("::1", "kubernetes").unwrap(), ServerName::try_from("kubernetes").unwrap());
        assert_eq!(
            server_name("192.0.2.11", "kubernetes").unwrap(),
            ServerName::IpAddress("192.0.2.11".parse::<IpAddr>().unwrap().into())
        );
        assert_eq!(
            server_name("cp1.example", "kubernetes").unwrap(),
            ServerName::try_from("cp1.example").unwrap()
        );
    }

    #[test]
    fn status_lines_parse() {
        assert_eq!(parse_status(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(parse_status(b"HTTP/1.0 503 Service Unavailable\r\n"), Some(503));
        assert_eq!(parse_status(b"SSH-2.0"), None);
    }

    #[test]
    fn insecure_is_refused_for_non_loopback() {
        let t = parse_url("https://192.0.2.11:6443/readyz").unwrap();
        assert!(insecure_config(&t).is_err());
        let t = parse_url("https://127.0.0.1:6443/readyz").unwrap();
        assert!(insecure_config(&t).is_ok());
    }
}
