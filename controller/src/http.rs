//! `/metrics` (OpenMetrics), `/healthz` and `/readyz` on `--metrics-addr`, served by the
//! project's one responder ([`ferrolb_runtime::http`]: bounded timeouts, accept backoff).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ferrolb_runtime::http::Answer;
use tokio::net::TcpListener;

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

fn answer(metrics: &Metrics, health: &Health, path: &str) -> Answer {
    match path {
        "/metrics" => {
            ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", metrics.encode())
        }
        "/healthz" | "/livez" => ("200 OK", "text/plain", "ok\n".to_owned()),
        "/readyz" if health.is_ready() => ("200 OK", "text/plain", "ready\n".to_owned()),
        "/readyz" => ("503 Service Unavailable", "text/plain", "not ready\n".to_owned()),
        _ => ("404 Not Found", "text/plain", "try /metrics, /healthz or /readyz\n".to_owned()),
    }
}

/// Binds the listener (so a bad address fails at startup with one clear line).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves until the task is dropped (see [`ferrolb_runtime::http::serve_on`]).
pub async fn serve(listener: TcpListener, metrics: Metrics, health: Health) {
    ferrolb_runtime::http::serve_on(listener, move |path| answer(&metrics, &health, path)).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ferrolb_runtime::http::response;
    use hyper::StatusCode;

    #[test]
    fn endpoints() {
        let (m, h) = (Metrics::new(), Health::default());
        let respond = |m: &Metrics, h: &Health, path: &str| response(answer(m, h, path));
        assert_eq!(respond(&m, &h, "/healthz").status(), StatusCode::OK);
        assert_eq!(respond(&m, &h, "/readyz").status(), StatusCode::SERVICE_UNAVAILABLE);
        h.set_ready(true);
        assert_eq!(respond(&m, &h, "/readyz").status(), StatusCode::OK);
        let r = respond(&m, &h, "/metrics");
        assert!(r.headers()[hyper::header::CONTENT_TYPE].to_str().unwrap_or("").contains("openmetrics"));
        assert_eq!(respond(&m, &h, "/nope").status(), StatusCode::NOT_FOUND);
    }
}
