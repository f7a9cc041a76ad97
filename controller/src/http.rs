//! `/metrics` (OpenMetrics), `/healthz` and `/readyz` on `--metrics-addr`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::debug;

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

/// Serves until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Metrics, health: Health) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // E.g. out of file descriptors: back off instead of spinning.
                debug!(error = %e, "metrics accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let (metrics, health) = (metrics.clone(), health.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let resp = respond(&metrics, &health, req.uri().path());
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            if let Err(e) =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await
            {
                debug!(%peer, error = %e, "metrics connection ended");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
