//! The refresh client certificate's expiry: exported as a metric, warned about within
//! 30 days of notAfter, at start and then at most once a day.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{Logs, PATIENCE};
use ferrolb_bootstrap::credentials::{self, ClientCertificate};
use ferrolb_bootstrap::metrics::Metrics;
use ferrolb_fakeapi::wait::until_within;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tracing::instrument::WithSubscriber;

const DAY: u64 = 86_400;

/// A client certificate signed by a fresh CA, valid for `days` from now (whole seconds),
/// in `dir` with a kubeconfig naming it (inline with `inline`); its notAfter, Unix seconds.
fn kubeconfig_with_cert(dir: &Path, days: u64, inline: bool) -> (PathBuf, i64) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "kubernetes");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, "system:ferrolb-bootstrap:cp1");
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    let not_after = now + days * DAY;
    params.not_before = (SystemTime::UNIX_EPOCH + Duration::from_secs(now - 300)).into();
    params.not_after = (SystemTime::UNIX_EPOCH + Duration::from_secs(not_after)).into();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let cert_file = dir.join("bootstrap.crt");
    let key_file = dir.join("bootstrap.key");
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let user = if inline {
        use base64::Engine;
        format!("client-certificate-data: {}", base64::engine::general_purpose::STANDARD.encode(cert.pem()))
    } else {
        format!("client-certificate: {}", cert_file.display())
    };
    let kubeconfig = dir.join("bootstrap.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1
kind: Config
clusters:
  - name: local
    cluster: {{server: \"https://127.0.0.1:6443\"}}
users:
  - name: ferrolb-bootstrap
    user:
      {user}
      client-key: {key}
contexts:
  - name: ferrolb-bootstrap
    context: {{cluster: local, user: ferrolb-bootstrap}}
current-context: ferrolb-bootstrap
",
            key = key_file.display()
        ),
    )
    .unwrap();
    (kubeconfig, i64::try_from(not_after).unwrap())
}

/// The client certificate of `kubeconfig`, read as `run` reads it.
async fn certificate_of(kubeconfig: &Path) -> ClientCertificate {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.unwrap();
    ClientCertificate::of(&config, kubeconfig).unwrap().expect("the kubeconfig names a client certificate")
}

/// Starts the expiry watch on the certificate of `kubeconfig`; returns once its first
/// check has run (the metric is set after it).
async fn watch(kubeconfig: &Path) -> (Arc<Metrics>, Logs, tokio::task::JoinHandle<()>) {
    let metrics = Arc::new(Metrics::new());
    let logs = Logs::default();
    let cert = certificate_of(kubeconfig).await;
    let task =
        tokio::spawn(credentials::watch_expiry(cert, metrics.clone()).with_subscriber(logs.dispatch()));
    until_within("the expiry metric", PATIENCE, || async {
        (metrics.client_certificate_expiry.get() != 0).then_some(())
    })
    .await;
    (metrics, logs, task)
}

fn metric_line(metrics: &Metrics) -> Option<String> {
    metrics
        .encode()
        .lines()
        .find(|l| l.starts_with("ferrolb_bootstrap_client_certificate_expiry_timestamp_seconds "))
        .map(String::from)
}

#[tokio::test]
async fn a_certificate_expiring_in_10_days_is_exported_and_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let (kubeconfig, not_after) = kubeconfig_with_cert(dir.path(), 10, false);
    let (metrics, logs, task) = watch(&kubeconfig).await;
    assert_eq!(metrics.client_certificate_expiry.get(), not_after);
    assert_eq!(
        metric_line(&metrics),
        Some(format!("ferrolb_bootstrap_client_certificate_expiry_timestamp_seconds {not_after}"))
    );
    let warnings = logs.at("WARN");
    assert_eq!(warnings.len(), 1, "{:#?}", logs.lines());
    let cert_file = dir.path().join("bootstrap.crt");
    assert!(
        warnings[0].contains("expires soon")
            && warnings[0].contains("days_left=10")
            && warnings[0].contains(&cert_file.display().to_string()),
        "{warnings:?}"
    );
    task.abort();
}

#[tokio::test]
async fn a_certificate_expiring_in_365_days_is_exported_without_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    // Inline in the kubeconfig, as kubeadm writes its own.
    let (kubeconfig, not_after) = kubeconfig_with_cert(dir.path(), 365, true);
    let (metrics, logs, task) = watch(&kubeconfig).await;
    assert_eq!(metrics.client_certificate_expiry.get(), not_after);
    assert!(logs.at("WARN").is_empty(), "{:#?}", logs.lines());
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn the_warning_repeats_once_a_day() {
    let dir = tempfile::tempdir().unwrap();
    let (kubeconfig, _) = kubeconfig_with_cert(dir.path(), 10, false);
    let (_metrics, logs, task) = watch(&kubeconfig).await;
    assert_eq!(logs.at("WARN").len(), 1);
    tokio::time::advance(Duration::from_secs(DAY - 60)).await;
    tokio::task::yield_now().await;
    assert_eq!(logs.at("WARN").len(), 1, "not again within the day");
    tokio::time::advance(Duration::from_secs(60)).await;
    until_within("the next day's warning", PATIENCE, || async { (logs.at("WARN").len() == 2).then_some(()) })
        .await;
    task.abort();
}

#[test]
fn the_metric_is_0_without_a_certificate() {
    assert_eq!(
        metric_line(&Metrics::new()),
        Some("ferrolb_bootstrap_client_certificate_expiry_timestamp_seconds 0".into())
    );
}
