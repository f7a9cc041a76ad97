//! The HTTP endpoint behind `/metrics`, `/healthz` and `/readyz` of the speaker, the
//! controller and bootstrap: hyper's HTTP/1, one request per connection. Every connection
//! is bounded in time: a client that never finishes its request head is dropped after
//! [`READ_TIMEOUT`], one that never reads the answer after [`READ_TIMEOUT`] +
//! [`WRITE_TIMEOUT`], instead of holding a task and a socket forever.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::accept::{AcceptBackoff, accept};

/// How long a client may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to read the answer (on top of [`READ_TIMEOUT`]).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// An answer: status line (e.g. `200 OK`), content type, body.
pub type Answer = (&'static str, &'static str, String);

/// Binds `addr` now (a bad address fails at startup) and answers each request on a task
/// with `answer(path)` until the runtime stops.
pub async fn serve<F>(addr: SocketAddr, answer: F) -> std::io::Result<()>
where
    F: Fn(&str) -> Answer + Send + Sync + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    tokio::spawn(serve_on(listener, answer));
    Ok(())
}

/// Answers each request on `listener` with `answer(path)` until the task is dropped;
/// failed accepts back off ([`AcceptBackoff`]).
pub async fn serve_on<F>(listener: TcpListener, answer: F)
where
    F: Fn(&str) -> Answer + Send + Sync + 'static,
{
    let answer = Arc::new(answer);
    let mut backoff = AcceptBackoff::default();
    loop {
        let (stream, peer) = accept(&listener, &mut backoff, "metrics").await;
        let answer = answer.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let resp = response(answer(req.uri().path()));
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(READ_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), svc);
            match tokio::time::timeout(READ_TIMEOUT + WRITE_TIMEOUT, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics connection ended"),
                Err(_) => {
                    tracing::debug!(%peer, "metrics connection dropped: the client did not read the answer in time")
                }
            }
        });
    }
}

/// The HTTP response of an [`Answer`]; a status line that does not start with a code
/// answers 500.
pub fn response((status, ctype, body): Answer) -> Response<Full<Bytes>> {
    let code = status
        .split_whitespace()
        .next()
        .and_then(|c| c.parse::<u16>().ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = code;
    if let Ok(v) = hyper::header::HeaderValue::from_str(ctype) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}

#[cfg(test)]
mod tests;
