//! Reaching the apiservers: their addresses in the lab, kube clients from kubeconfigs,
//! and `/readyz` probes through the host's forwarders.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::forward::Forwarder;
use super::pki::write_cert_kubeconfig;
use super::{APISERVER_PORT, Paths};
use ferrolb_lab::{Error, addressing, wait};

/// Where apiserver `i` listens: lab node `i`'s address, [`APISERVER_PORT`].
pub(super) fn apiserver_addr(i: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(addressing::node_v4(i)), APISERVER_PORT)
}

/// A kube client from a kubeconfig file, bound to `rt` (call it outside `rt`'s tasks).
pub fn client_from(rt: &tokio::runtime::Runtime, kubeconfig: &Path) -> Result<kube::Client, Error> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .map_err(|e| Error::Parse(format!("kubeconfig {}: {e}", kubeconfig.display())))?;
    let config = rt
        .block_on(kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()))
        .map_err(|e| Error::Parse(format!("kubeconfig {}: {e}", kubeconfig.display())))?;
    let _g = rt.enter();
    kube::Client::try_from(config)
        .map_err(|e| Error::Parse(format!("client for {}: {e}", kubeconfig.display())))
}

/// `GET /readyz` through a forwarder with the admin's credentials: `Ok(true)` on `ok`.
pub(super) fn probe_ready(
    rt: &tokio::runtime::Runtime,
    via: &Forwarder,
    paths: &Paths,
) -> Result<bool, Error> {
    let conf = paths.dir.join(format!("probe-{}.conf", via.addr().port()));
    if !conf.exists() {
        write_cert_kubeconfig(paths, &conf, &format!("https://{}", via.addr()), "kubernetes-admin", "admin")?;
    }
    let client = client_from(rt, &conf)?;
    let req = http::Request::get("/readyz").body(Vec::new()).map_err(|e| Error::Parse(e.to_string()))?;
    let fut = async move { tokio::time::timeout(Duration::from_secs(3), client.request_text(req)).await };
    match rt.block_on(fut) {
        Ok(Ok(body)) => Ok(body.trim() == "ok"),
        Ok(Err(e)) => Err(Error::Parse(e.to_string())),
        Err(_) => Err(Error::Parse("/readyz timed out".into())),
    }
}

/// Waits up to `timeout` until [`probe_ready`] through `via` says `ok`.
pub(super) fn wait_ready(
    rt: &tokio::runtime::Runtime,
    via: &Forwarder,
    paths: &Paths,
    timeout: Duration,
) -> Result<(), Error> {
    wait::until(&format!("/readyz ok at {}", via.target_desc()), timeout, || {
        Ok(probe_ready(rt, via, paths)?.then_some(()))
    })
}
