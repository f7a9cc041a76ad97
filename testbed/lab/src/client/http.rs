//! HTTP between lab namespaces: a GET from a client, and a tiny server answering every
//! request with a fixed body.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::serve::Serving;
use crate::Error;
use crate::netns::Netns;

/// Fetches `http://addr:port/path` from inside `ns`; returns the body.
pub fn http_get(ns: &Netns, addr: SocketAddr, path: &str, timeout: Duration) -> Result<String, Error> {
    let path = path.to_string();
    ns.run(move || -> Result<String, Error> {
        let mut s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        // One write: `write!` would send each formatted piece as its own segment, and a
        // server that answers after its first read closes with the rest unread (RST).
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)?;
        let (head, body) =
            resp.split_once("\r\n\r\n").ok_or_else(|| Error::Parse(format!("HTTP response: {resp}")))?;
        if !head.starts_with("HTTP/1.") || head.split_whitespace().nth(1).is_none_or(|c| c != "200") {
            return Err(Error::Parse(format!("HTTP status: {head}")));
        }
        Ok(body.to_string())
    })?
}

/// The value of one series in a Prometheus or OpenMetrics text: `series` is its whole
/// name with any labels as exposed (`ferrolb_l2_address_conflicts_total{result="won"}`).
pub fn metric_sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A tiny HTTP server inside a namespace answering every request with a fixed body
/// (which node answered). Stops when dropped.
#[derive(Debug)]
pub struct HttpServer {
    _serving: Serving,
}

impl HttpServer {
    /// Serves `body` on `bind` inside `ns`.
    pub fn start(ns: &Netns, bind: SocketAddr, body: &str) -> Result<Self, Error> {
        let body = body.to_string();
        let serving = Serving::start(ns, bind, 64, move |mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            read_request_head(&mut s);
            let _ = write!(
                s,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        })?;
        Ok(HttpServer { _serving: serving })
    }
}

/// Reads until the end of the request head (or 8 KiB, EOF, error or the read timeout),
/// so the answer never races request bytes still arriving: closing a socket with
/// unread data resets the connection.
fn read_request_head(s: &mut TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(buf.get(..n).unwrap_or_default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::metric_sample;

    #[test]
    fn a_sample_is_read_by_its_whole_series_name() {
        let text = "# TYPE x histogram\nx_sum 0.5\nx_count 3\nx_bucket{le=\"+Inf\"} 3\nx 7\nlost_total{result=\"won\"} 2\n";
        assert_eq!(metric_sample(text, "x"), Some(7.0), "not x_sum nor x_count, which x begins");
        assert_eq!(metric_sample(text, "x_count"), Some(3.0));
        assert_eq!(metric_sample(text, "lost_total{result=\"won\"}"), Some(2.0));
        assert_eq!(metric_sample(text, "lost_total"), None, "a labelled series needs its labels");
        assert_eq!(metric_sample(text, "absent"), None);
    }
}
