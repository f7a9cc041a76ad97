//! The one-request-per-connection HTTP endpoint behind `/metrics`, `/healthz` and
//! `/readyz` of the speaker and of bootstrap. Every connection is bounded in time: a
//! client that never finishes its request, or never reads the answer, is dropped after
//! [`READ_TIMEOUT`] / [`WRITE_TIMEOUT`] instead of holding a task and a socket forever.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::accept::{AcceptBackoff, accept};

/// How long a client may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to read the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest request head read; the rest is ignored.
const MAX_HEAD: usize = 4096;

/// An answer: status line (e.g. `200 OK`), content type, body.
pub type Answer = (&'static str, &'static str, String);

/// Binds `addr` now (a bad address fails at startup) and answers each request on a task
/// with `answer(path)` until the runtime stops.
pub async fn serve<F>(addr: SocketAddr, answer: F) -> std::io::Result<()>
where
    F: Fn(&str) -> Answer + Send + Sync + 'static,
{
    let listener = TcpListener::bind(addr).await?;
    tokio::spawn(serve_on(listener, Arc::new(answer)));
    Ok(())
}

async fn serve_on<F>(listener: TcpListener, answer: Arc<F>)
where
    F: Fn(&str) -> Answer + Send + Sync + 'static,
{
    let mut backoff = AcceptBackoff::default();
    loop {
        let (stream, _) = accept(&listener, &mut backoff, "metrics").await;
        tokio::spawn(respond(stream, answer.clone()));
    }
}

async fn respond<F>(mut stream: tokio::net::TcpStream, answer: Arc<F>)
where
    F: Fn(&str) -> Answer + Send + Sync + 'static,
{
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(head)) => head,
        // Nothing to answer: an error, or no complete request in time.
        Ok(Err(_)) | Err(_) => return,
    };
    let req = String::from_utf8_lossy(&head);
    let path = req.split_whitespace().nth(1).unwrap_or("/");
    let (status, ctype, body) = answer(path);
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, write).await;
}

/// Reads the whole request head (a client may send it in pieces; closing with unread
/// bytes would reset the connection under the client's feet), at most [`MAX_HEAD`].
/// A client closing early gives what it sent.
async fn read_head(s: &mut tokio::net::TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_HEAD {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const BIG: usize = 32 << 20;

    async fn server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_on(
            listener,
            Arc::new(|path: &str| match path {
                // Larger than both socket buffers: its writer waits on the reader.
                "/big" => ("200 OK", "text/plain", "x".repeat(BIG)),
                _ => ("200 OK", "text/plain", "ok\n".to_owned()),
            }),
        ));
        addr
    }

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(READ_TIMEOUT, s.read_to_string(&mut out)).await.unwrap().unwrap();
        out
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_finishes_its_request_is_dropped_after_the_read_timeout() {
        let addr = server().await;
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metr").await.unwrap();
        let t0 = tokio::time::Instant::now();
        let mut out = Vec::new();
        // Paused clock: time jumps to the next timer once every task waits.
        let r = tokio::time::timeout(READ_TIMEOUT * 6, s.read_to_end(&mut out)).await;
        assert!(matches!(r, Ok(Ok(0))), "closed without an answer: {r:?}");
        let waited = t0.elapsed();
        assert!(waited >= READ_TIMEOUT && waited < READ_TIMEOUT * 2, "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_reads_is_dropped_after_the_write_timeout_and_blocks_nobody() {
        let addr = server().await;
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        // Other scrapes are answered meanwhile.
        assert!(get(addr, "/metrics").await.ends_with("ok\n"));
        // The slow client reads only long after the write timeout: the server gave up.
        tokio::time::sleep(WRITE_TIMEOUT * 3).await;
        let mut out = Vec::new();
        let r = tokio::time::timeout(WRITE_TIMEOUT, slow.read_to_end(&mut out)).await;
        assert!(r.is_ok(), "the server closed the connection");
        assert!(out.len() < BIG, "cut short: {} of {BIG} bytes", out.len());
    }

    #[tokio::test]
    async fn a_request_head_arriving_in_pieces_is_read_whole() {
        let addr = server().await;
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /rea").await.unwrap();
        s.flush().await.unwrap();
        tokio::task::yield_now().await;
        s.write_all(b"dyz HTTP/1.0\r\nHost: x\r\n\r\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("ok\n"), "{out}");
    }
}
