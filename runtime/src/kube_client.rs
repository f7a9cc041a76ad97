//! Every ferrolb binary's Kubernetes client: deadlines on each request, client-side
//! request limits ([`throttle`]), large answers compressed ([`compression`]) and what it
//! receives counted ([`received`]).

mod received;
mod throttle;

use std::time::Duration;

pub use received::{Received, ReceivedLayer};
pub use throttle::{Limits, Throttle, ThrottleLayer};

/// A client for `config` with the deadlines of [`with_deadlines`], its requests held to
/// `limits` (one of the [`Limits`] constants of the binary it runs in), asking for
/// compressed answers ([`compression`]; not when the kubeconfig says
/// `disable-compression: true`) and what it receives counted into `received`
/// (registered in the binary's metrics) as the apiserver sent it.
pub fn client(
    config: kube::Config,
    limits: Limits,
    received: &Received,
) -> Result<kube::Client, kube::Error> {
    let gzip = !config.disable_compression;
    // The throttle outermost, right under the Client's queue, whose order it keeps.
    // kube's own retries (a 429, 503 or 504, after a back-off or the server's
    // Retry-After) are paced by the apiserver and not counted again. The counter under
    // the decompression: it counts the bytes the apiserver sent.
    Ok(kube::client::ClientBuilder::try_from(with_deadlines(config))?
        .with_layer(&ReceivedLayer::new(received))
        .with_layer(&compression(gzip))
        .with_layer(&ThrottleLayer::new(limits))
        .build())
}

/// Asks for gzip (`Accept-Encoding: gzip`) and decompresses what comes so, as client-go
/// does by default: the apiserver compresses answers over 128 KiB (lists; never a
/// watch), and a restarted speaker's lists of every Node, Service and EndpointSlice
/// are most of what a rolling restart costs it (`BENCHMARKS.md`, "Cluster scale").
/// kube's own `gzip` feature would decompress under every layer added here, so the
/// received bytes would count what the apiserver did not send.
pub fn compression(gzip: bool) -> tower_http::decompression::DecompressionLayer {
    tower_http::decompression::DecompressionLayer::new().no_br().no_deflate().no_zstd().gzip(gzip)
}

/// Deadlines on every request of a client. kube's defaults have no read timeout: a
/// request the apiserver accepted and never answers would wait forever. The calls a
/// binary makes itself have tighter ones (the speaker's `cluster::CALL_TIMEOUT`, the
/// controller's `fence.rs`, the bootstrap refresh's `CALL_TIMEOUT`); these bound what
/// kube-runtime's watchers send (each list, each watch's start) and any stream that
/// goes silent. The read timeout must outlast a quiet watch, which the apiserver ends
/// after the 290 s kube-runtime asks for.
fn with_deadlines(mut config: kube::Config) -> kube::Config {
    config.connect_timeout = Some(Duration::from_secs(10));
    config.write_timeout = Some(Duration::from_secs(30));
    config.read_timeout = Some(Duration::from_secs(300));
    // From when each request is sent, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    config
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::io::Write as _;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::{Request, Response};
    use kube::client::Body as KubeBody;
    use tower::Layer;

    use super::*;

    /// A list as an apiserver sends one over 128 KiB when asked for gzip.
    #[tokio::test]
    async fn large_answers_come_compressed_and_are_counted_as_sent() {
        let list =
            format!("{{\"kind\":\"NodeList\",\"items\":[{}]}}", vec!["{\"kind\":\"Node\"}"; 2000].join(","));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(list.as_bytes()).unwrap();
        let compressed = Bytes::from(gz.finish().unwrap());
        for gzip in [true, false] {
            let (plain, packed) = (list.clone(), compressed.clone());
            let stub = tower::service_fn(move |req: Request<KubeBody>| {
                let asked = req
                    .headers()
                    .get("accept-encoding")
                    .is_some_and(|v| v.to_str().unwrap_or("").contains("gzip"));
                let response = match asked {
                    true => {
                        Response::builder().header("content-encoding", "gzip").body(Full::new(packed.clone()))
                    }
                    false => Response::builder().body(Full::new(Bytes::from(plain.clone()))),
                };
                async move { Ok::<_, Infallible>(response.unwrap()) }
            });
            let received = Received::default();
            let client = kube::Client::new(
                compression(gzip).layer(ReceivedLayer::new(&received).layer(stub)),
                "default",
            );
            let response =
                client.send(Request::get("/api/v1/nodes").body(KubeBody::empty()).unwrap()).await.unwrap();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, list.as_bytes(), "gzip {gzip}: the list as the server meant it");
            let sent = if gzip { compressed.len() } else { list.len() };
            assert_eq!(received.bytes("list", "nodes"), sent as u64, "gzip {gzip}: counted as sent");
        }
        assert!(compressed.len() * 10 < list.len(), "{} of {} bytes", compressed.len(), list.len());
    }

    #[test]
    fn every_request_has_deadlines_and_a_quiet_watch_outlives_none() {
        let config = with_deadlines(kube::Config::new("https://192.0.2.1:6443".parse().unwrap()));
        assert!(config.connect_timeout.is_some() && config.write_timeout.is_some());
        // kube-runtime asks the apiserver to end a quiet watch after 290 s.
        assert!(config.read_timeout.is_some_and(|t| t > Duration::from_secs(290)));
        assert!(config.reset_reader_on_write);
    }
}
