//! `/metrics` (OpenMetrics), `/healthz` and `/readyz` on `--metrics-addr`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::time::{Duration, Instant};
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// Readiness shared between the controller and the HTTP endpoint.
#[derive(Debug, Default, Clone)]
pub struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    /// Marks the replica ready (leader: state rebuilt; standby: the Lease was read).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

fn respond(metrics: &Metrics, health: &Health, path: &str) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match path {
        "/metrics" => {
            (StatusCode::OK, "application/openmetrics-text; version=1.0.0; charset=utf-8", metrics.encode())
        }
        "/healthz" | "/livez" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/readyz" if health.is_ready() => (StatusCode::OK, "text/plain", "ready\n".to_owned()),
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", "not ready\n".to_owned()),
        _ => (StatusCode::NOT_FOUND, "text/plain", "try /metrics, /healthz or /readyz\n".to_owned()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(ctype) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}

/// Binds the listener (so a bad address fails at startup with one clear line).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// How long a client may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to read the answer (on top of [`READ_TIMEOUT`]).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// When to retry after a failed accept and whether to log it: 5 ms doubling to 1 s,
/// from the start again after a success; one log line a second at most. The same
/// sans-IO type as `ferrolb_proto::accept::AcceptBackoff` (the controller does not
/// depend on the speaker crate).
#[derive(Debug)]
struct AcceptBackoff {
    next: Duration,
    logged: Option<Instant>,
    quiet: u64,
}

impl AcceptBackoff {
    const MIN: Duration = Duration::from_millis(5);
    const MAX: Duration = Duration::from_secs(1);

    fn new() -> Self {
        AcceptBackoff { next: Self::MIN, logged: None, quiet: 0 }
    }

    /// The pause before the next accept, and the count of quiet errors if this one is logged.
    fn failed(&mut self, now: Instant) -> (Duration, Option<u64>) {
        let pause = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        match self.logged {
            Some(t) if now.saturating_duration_since(t) < Self::MAX => {
                self.quiet += 1;
                (pause, None)
            }
            _ => {
                self.logged = Some(now);
                (pause, Some(std::mem::take(&mut self.quiet)))
            }
        }
    }

    fn succeeded(&mut self) {
        self.next = Self::MIN;
    }
}

/// Serves until the task is dropped. One request per connection, each bounded by
/// [`READ_TIMEOUT`] + [`WRITE_TIMEOUT`]: a scraper that stalls holds no task for long.
pub async fn serve(listener: TcpListener, metrics: Metrics, health: Health) {
    let mut backoff = AcceptBackoff::new();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => {
                backoff.succeeded();
                c
            }
            Err(e) => {
                // E.g. out of file descriptors: back off instead of spinning.
                let (pause, log) = backoff.failed(Instant::now());
                if let Some(more) = log {
                    warn!(error = %e, more_errors = more, ?pause, "metrics: cannot accept a connection; pausing");
                }
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        let (metrics, health) = (metrics.clone(), health.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let resp = respond(&metrics, &health, req.uri().path());
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(READ_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), svc);
            match tokio::time::timeout(READ_TIMEOUT + WRITE_TIMEOUT, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(%peer, error = %e, "metrics connection ended"),
                Err(_) => {
                    debug!(%peer, "metrics connection dropped: the client did not read the answer in time")
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn accept_errors_pause_5ms_doubling_to_1s_and_log_once_a_second() {
        let mut b = AcceptBackoff::new();
        let t0 = Instant::now();
        let pauses: Vec<u128> = (0..10).map(|_| b.failed(t0).0.as_millis()).collect();
        assert_eq!(pauses, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed(t0).0, AcceptBackoff::MIN);
        let mut b = AcceptBackoff::new();
        assert_eq!(b.failed(t0).1, Some(0));
        assert_eq!(b.failed(t0 + Duration::from_millis(500)).1, None);
        assert_eq!(b.failed(t0 + Duration::from_secs(1)).1, Some(1));
    }

    async fn server(metrics: Metrics) -> SocketAddr {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, metrics, Health::default()));
        addr
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_finishes_its_request_is_dropped_after_the_read_timeout() {
        let addr = server(Metrics::new()).await;
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metr").await.unwrap();
        let t0 = Instant::now();
        let mut out = Vec::new();
        // Paused clock: time jumps to the next timer once every task waits.
        let r = tokio::time::timeout(READ_TIMEOUT * 6, s.read_to_end(&mut out)).await;
        assert!(r.is_ok(), "the server closed the connection");
        let waited = t0.elapsed();
        assert!(waited >= READ_TIMEOUT && waited < READ_TIMEOUT * 2, "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_reads_is_dropped_and_blocks_no_other_scrape() {
        let m = Metrics::new();
        // An exposition larger than both socket buffers: its writer waits on the reader.
        for i in 0..200_000 {
            m.allocation(&format!("result-{i:06}"));
        }
        let size = m.encode().len();
        assert!(size > 8 << 20, "{size}");
        let addr = server(m).await;
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut other = tokio::net::TcpStream::connect(addr).await.unwrap();
        other.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(READ_TIMEOUT, other.read_to_string(&mut out)).await.unwrap().unwrap();
        assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("ok\n"), "{out}");
        tokio::time::sleep((READ_TIMEOUT + WRITE_TIMEOUT) * 3).await;
        let mut got = Vec::new();
        let r = tokio::time::timeout(WRITE_TIMEOUT, slow.read_to_end(&mut got)).await;
        assert!(r.is_ok(), "the server closed the connection");
        assert!(got.len() < size, "cut short: {} of {size} bytes", got.len());
    }

    #[test]
    fn endpoints() {
        let (m, h) = (Metrics::new(), Health::default());
        assert_eq!(respond(&m, &h, "/healthz").status(), StatusCode::OK);
        assert_eq!(respond(&m, &h, "/readyz").status(), StatusCode::SERVICE_UNAVAILABLE);
        h.set_ready(true);
        assert_eq!(respond(&m, &h, "/readyz").status(), StatusCode::OK);
        let r = respond(&m, &h, "/metrics");
        assert!(r.headers()[hyper::header::CONTENT_TYPE].to_str().unwrap_or("").contains("openmetrics"));
        assert_eq!(respond(&m, &h, "/nope").status(), StatusCode::NOT_FOUND);
    }
}
