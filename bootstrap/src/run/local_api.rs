//! The refresh's client of the local apiserver: loopback only, with deadlines and request limits.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::Metrics;
use crate::{credentials, refresh};
use anyhow::bail;
use ferrolb_runtime::kube_client::{self, Limits};
use tokio::sync::watch;

/// Starts the checkpoint refresh from the local apiserver with `kubeconfig`, and the
/// watch on its client certificate's expiry.
pub(super) async fn start_refresh(
    kubeconfig: &Path,
    checkpoint: &Path,
    vip_name: &str,
    written: watch::Sender<u64>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<()> {
    let config = local_config(kubeconfig).await?;
    match credentials::ClientCertificate::of(&config, kubeconfig) {
        Ok(Some(cert)) => {
            tokio::spawn(credentials::watch_expiry(cert, metrics.clone()));
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the refresh client certificate's expiry"),
    }
    let client = kube_client::client(config, Limits::BOOTSTRAP, &metrics.kube_received)?;
    let resync = Duration::from_secs(60);
    let path = checkpoint.to_path_buf();
    tokio::spawn(refresh::run(client, vip_name.into(), path, resync, Some(written), metrics.clone()));
    Ok(())
}

/// The client configuration of `kubeconfig`, refused unless it points at the local apiserver.
async fn local_config(kubeconfig: &Path) -> anyhow::Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let host = config.cluster_url.host().unwrap_or_default().trim_matches(['[', ']']).to_string();
    let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        bail!(
            "{}: server {} is not the local apiserver (loopback only, never the VIP)",
            kubeconfig.display(),
            config.cluster_url
        );
    }
    Ok(config)
}
