#![allow(clippy::unwrap_used)]
use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIG: usize = 32 << 20;

async fn server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_on(listener, |path: &str| match path {
        // Larger than both socket buffers: its writer waits on the reader.
        "/big" => ("200 OK", "text/plain", "x".repeat(BIG)),
        _ => ("200 OK", "text/plain", "ok\n".to_owned()),
    }));
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
async fn a_client_that_never_reads_is_dropped_and_blocks_no_other_scrape() {
    let addr = server().await;
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    // Other scrapes are answered meanwhile.
    let out = get(addr, "/healthz").await;
    assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("ok\n"), "{out}");
    // The slow client reads only long after the timeouts: the server gave up.
    tokio::time::sleep((READ_TIMEOUT + WRITE_TIMEOUT) * 3).await;
    let mut got = Vec::new();
    let r = tokio::time::timeout(WRITE_TIMEOUT, slow.read_to_end(&mut got)).await;
    assert!(r.is_ok(), "the server closed the connection");
    assert!(got.len() < BIG, "cut short: {} of {BIG} bytes", got.len());
}

#[tokio::test]
async fn a_request_head_arriving_in_pieces_is_read_whole() {
    let addr = server().await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /rea").await.unwrap();
    s.flush().await.unwrap();
    tokio::task::yield_now().await;
    s.write_all(b"dyz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("ok\n"), "{out}");
}

#[test]
fn status_lines_become_status_codes() {
    let r = response(("503 Service Unavailable", "text/plain", String::new()));
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()[hyper::header::CONTENT_TYPE], "text/plain");
    assert_eq!(response(("404 Not Found", "text/plain", String::new())).status(), StatusCode::NOT_FOUND);
    assert_eq!(response(("OK", "text/plain", String::new())).status(), StatusCode::INTERNAL_SERVER_ERROR);
}
