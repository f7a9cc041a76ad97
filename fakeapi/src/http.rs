//! The fake apiserver over plain HTTP/1.1, for processes that cannot share the test's
//! `kube::Client`: a real `ferrolb-speaker --kubeconfig` in a testbed namespace.
//!
//! Every request goes through the same [`FakeService`](crate::FakeService) as the
//! in-process client, so resourceVersions, watches, 409s and the outage controls
//! (`set_unavailable`, `set_hanging`) behave identically for both.

use std::convert::Infallible;
use std::path::Path;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::{FakeApiServer, ResponseBody};

/// Serves `api` on `listener` until the task is aborted; one task per connection.
/// Must be called inside a tokio runtime.
pub fn serve(api: &FakeApiServer, listener: TcpListener) -> tokio::task::JoinHandle<()> {
    let svc = api.service();
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of descriptors or similar: back off rather than spin.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let svc = svc.clone();
            tokio::spawn(async move {
                let handler = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let mut svc = svc.clone();
                    async move { Ok::<_, Infallible>(forward(&mut svc, req).await) }
                });
                // A client that goes away mid-watch ends its connection; nothing to report.
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), handler)
                    .await;
            });
        }
    })
}

async fn forward(svc: &mut crate::FakeService, req: Request<Incoming>) -> Response<ResponseBody> {
    let (parts, body) = req.into_parts();
    let bytes = match body.collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let req = Request::from_parts(parts, kube::client::Body::from(bytes));
    match tower::Service::call(svc, req).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// A kubeconfig whose only cluster is `http://{server}` with no credentials.
pub fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{server}\n\
         contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\n\
         current-context: fake\nusers:\n- name: fake\n  user: {{}}\n"
    )
}

/// Writes [`kubeconfig`] to `path`.
pub fn write_kubeconfig(path: &Path, server: &str) -> std::io::Result<()> {
    std::fs::write(path, kubeconfig(server))
}
