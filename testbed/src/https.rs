//! A fake local apiserver health endpoint: an HTTPS server inside a lab namespace,
//! with a test CA made by rcgen, answering `200 ok` or `503` as the test switches it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

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
}

/// The fake health endpoint; stops when dropped.
#[derive(Debug)]
pub struct HealthServer {
    healthy: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl HealthServer {
    /// Serves HTTPS on `bind` inside `ns` with a certificate for `names` signed by `ca`;
    /// starts healthy.
    pub fn start(ns: &Netns, bind: SocketAddr, ca: &TestCa, names: &[&str]) -> Result<Self, Error> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let (cert, key) = ca.serving_cert(names)?;
        let tls_err = |e: String| Error::Command { command: "rustls".into(), detail: e };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| tls_err(e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| tls_err(e.to_string()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_err(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| tls_err(e.to_string()))?;
        let config = Arc::new(config);
        let healthy = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let path = ns.path();
        let (tx, rx) = std::sync::mpsc::channel();
        let (h, s, r) = (healthy.clone(), stop.clone(), requests.clone());
        let thread = std::thread::spawn(move || {
            let listener = netns::enter(&path).and_then(|()| {
                let l = TcpListener::bind(bind)?;
                l.set_nonblocking(true)?;
                Ok(l)
            });
            let listener = match listener {
                Ok(l) => {
                    let _ = tx.send(Ok(()));
                    l
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let _ = serve(stream, &config, h.load(Ordering::Relaxed));
                        r.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        rx.recv().map_err(|_| Error::Thread("health server thread died".into()))??;
        Ok(HealthServer { healthy, stop, requests, thread: Some(thread) })
    }

    /// Switches the answer between `200 ok` and `503`.
    pub fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::Relaxed);
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

fn serve(
    stream: std::net::TcpStream,
    config: &Arc<rustls::ServerConfig>,
    healthy: bool,
) -> std::io::Result<()> {
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
    let answer: &[u8] = if healthy {
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    } else {
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 9\r\nConnection: close\r\n\r\nunhealthy"
    };
    tls.write_all(answer)?;
    tls.conn.send_close_notify();
    tls.flush()
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
