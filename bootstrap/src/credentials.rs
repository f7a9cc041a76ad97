//! Least-privilege credentials for the checkpoint refresh: a client certificate signed
//! by the cluster CA (CN `system:ferrolb-bootstrap:<node>`, O [`GROUP`]) and a kubeconfig
//! that talks to the local apiserver only. [`GROUP`] is bound to a ClusterRole that can
//! only get/list/watch ControlPlaneVIPs, BGPPeers and BFDProfiles (see the README).
//! [`watch_expiry`] exports the expiry of the certificate in use and warns before it.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose,
};

use crate::metrics::Metrics;

/// The group the certificate carries (`O=`), bound by the ClusterRoleBinding.
pub const GROUP: &str = "ferrolb.io:bootstrap";

/// The read-only RBAC for [`GROUP`], as `kubectl apply -f` takes it.
pub const RBAC_YAML: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ferrolb-bootstrap
rules:
  - apiGroups: [ferrolb.io]
    resources: [controlplanevips, bgppeers, bfdprofiles]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ferrolb-bootstrap
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: ferrolb-bootstrap
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: Group
    name: ferrolb.io:bootstrap
";

/// Why credentials could not be made; names the file.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// A file could not be read or written.
    #[error("{file}: {detail}")]
    File {
        /// The file.
        file: String,
        /// What went wrong.
        detail: String,
    },
    /// rcgen refused (bad CA key or certificate).
    #[error("{what}: {detail}")]
    Cert {
        /// What was being done.
        what: String,
        /// rcgen's message.
        detail: String,
    },
}

/// Where the CA is and where the kubeconfig points.
#[derive(Debug, Clone)]
pub struct Request {
    /// Node name, in the certificate's CN.
    pub node: String,
    /// Cluster CA certificate (PEM).
    pub ca_cert: PathBuf,
    /// Cluster CA key (PEM). Read, never copied.
    pub ca_key: PathBuf,
    /// Directory for the key, certificate and kubeconfig (the checkpoint's directory).
    pub dir: PathBuf,
    /// The local apiserver URL (loopback).
    pub server: String,
    /// Name verified in the apiserver's certificate (kubeadm's has `kubernetes`, not 127.0.0.1).
    pub tls_server_name: String,
    /// Validity in days.
    pub days: u32,
}

/// Files written by [`write`].
#[derive(Debug, Clone)]
pub struct Written {
    /// The kubeconfig (0600).
    pub kubeconfig: PathBuf,
    /// The client certificate.
    pub cert: PathBuf,
    /// The client key (0600).
    pub key: PathBuf,
}

fn read(path: &Path) -> Result<String, CredentialsError> {
    fs::read_to_string(path)
        .map_err(|e| CredentialsError::File { file: path.display().to_string(), detail: e.to_string() })
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), CredentialsError> {
    let err = |e: std::io::Error| CredentialsError::File {
        file: path.display().to_string(),
        detail: e.to_string(),
    };
    let tmp = path.with_extension("tmp");
    let mut f =
        fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(&tmp).map_err(err)?;
    f.set_permissions(fs::Permissions::from_mode(0o600)).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    fs::rename(&tmp, path).map_err(err)
}

/// The client certificate and key for `node`, signed by the CA (PEM strings).
pub fn issue(req: &Request) -> Result<(String, String), CredentialsError> {
    let cert_err = |what: &str| {
        let what = what.to_owned();
        move |e: rcgen::Error| CredentialsError::Cert { what, detail: e.to_string() }
    };
    let ca_key = KeyPair::from_pem(&read(&req.ca_key)?).map_err(cert_err("reading the CA key"))?;
    let issuer = Issuer::from_ca_cert_pem(&read(&req.ca_cert)?, ca_key)
        .map_err(cert_err("reading the CA certificate"))?;
    let key = KeyPair::generate().map_err(cert_err("making a key"))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("system:ferrolb-bootstrap:{}", req.node));
    dn.push(DnType::OrganizationName, GROUP);
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let now = std::time::SystemTime::now();
    params.not_before = (now - std::time::Duration::from_secs(300)).into();
    params.not_after = (now + std::time::Duration::from_secs(u64::from(req.days) * 86_400)).into();
    let cert = params.signed_by(&key, &issuer).map_err(cert_err("signing the client certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Issues the certificate and writes key, certificate and kubeconfig into `req.dir`.
pub fn write(req: &Request) -> Result<Written, CredentialsError> {
    let (cert, key) = issue(req)?;
    let dir_err = |e: std::io::Error| CredentialsError::File {
        file: req.dir.display().to_string(),
        detail: e.to_string(),
    };
    fs::create_dir_all(&req.dir).map_err(dir_err)?;
    let out = Written {
        kubeconfig: req.dir.join("bootstrap.kubeconfig"),
        cert: req.dir.join("bootstrap.crt"),
        key: req.dir.join("bootstrap.key"),
    };
    write_private(&out.key, key.as_bytes())?;
    write_private(&out.cert, cert.as_bytes())?;
    write_private(&out.kubeconfig, kubeconfig(req, &out).as_bytes())?;
    Ok(out)
}

fn kubeconfig(req: &Request, out: &Written) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    format!(
        "apiVersion: v1
kind: Config
clusters:
  - name: local
    cluster:
      server: {server}
      certificate-authority: {ca}
      tls-server-name: {tsn}
users:
  - name: ferrolb-bootstrap
    user:
      client-certificate: {cert}
      client-key: {key}
contexts:
  - name: ferrolb-bootstrap
    context: {{cluster: local, user: ferrolb-bootstrap}}
current-context: ferrolb-bootstrap
",
        server = q(&req.server),
        ca = q(&req.ca_cert.display().to_string()),
        tsn = q(&req.tls_server_name),
        cert = q(&out.cert.display().to_string()),
        key = q(&out.key.display().to_string()),
    )
}

/// How long before its expiry the refresh client certificate is warned about.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 86_400);

/// The client certificate a kubeconfig's user presents, and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// Where it was read: the certificate file, or the kubeconfig holding it inline.
    pub source: String,
    /// notAfter, in Unix seconds.
    pub not_after: i64,
    /// notAfter as text, for logs.
    pub not_after_text: String,
}

impl ClientCertificate {
    /// The client certificate of `config`'s user (`client-certificate-data`, else
    /// `client-certificate`); `None` when the user presents none. `kubeconfig` names
    /// inline data in errors.
    pub fn of(config: &kube::Config, kubeconfig: &Path) -> Result<Option<Self>, CredentialsError> {
        let user = &config.auth_info;
        if let Some(data) = &user.client_certificate_data {
            use base64::Engine;
            let source = format!("{}: client-certificate-data", kubeconfig.display());
            let pem = base64::engine::general_purpose::STANDARD.decode(data.trim()).map_err(|e| {
                CredentialsError::File { file: source.clone(), detail: format!("not base64: {e}") }
            })?;
            return Self::from_pem(&source, &pem).map(Some);
        }
        match &user.client_certificate {
            Some(file) => {
                let pem = fs::read(file)
                    .map_err(|e| CredentialsError::File { file: file.clone(), detail: e.to_string() })?;
                Self::from_pem(file, &pem).map(Some)
            }
            None => Ok(None),
        }
    }

    /// The first certificate of a PEM text read from `source`.
    pub fn from_pem(source: &str, pem: &[u8]) -> Result<Self, CredentialsError> {
        let err = |detail: String| CredentialsError::File { file: source.to_owned(), detail };
        let (_, pem) =
            x509_parser::pem::parse_x509_pem(pem).map_err(|e| err(format!("not a PEM certificate: {e}")))?;
        let cert = pem.parse_x509().map_err(|e| err(format!("not an X.509 certificate: {e}")))?;
        let not_after = cert.validity().not_after;
        Ok(ClientCertificate {
            source: source.to_owned(),
            not_after: not_after.timestamp(),
            not_after_text: not_after.to_string(),
        })
    }

    /// Seconds left at `now` until notAfter (negative once expired).
    pub fn seconds_left(&self, now: SystemTime) -> i64 {
        let now = match now.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
        };
        self.not_after.saturating_sub(now)
    }
}

/// Exports `cert`'s expiry (`ferrolb_bootstrap_client_certificate_expiry_timestamp_seconds`)
/// and, at start and then once a day, warns while less than [`EXPIRY_WARNING`] is left.
/// The client read the certificate at start, so a renewal takes a restart. Runs until
/// the task is dropped.
pub async fn watch_expiry(cert: ClientCertificate, metrics: Arc<Metrics>) {
    let mut daily = tokio::time::interval(Duration::from_secs(86_400));
    daily.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let warn_secs = i64::try_from(EXPIRY_WARNING.as_secs()).unwrap_or(i64::MAX);
    loop {
        daily.tick().await;
        let left = cert.seconds_left(SystemTime::now());
        if left < warn_secs {
            // Whole days, rounded: a certificate made for 10 days says 10 right after.
            let days_left = left.saturating_add(43_200).div_euclid(86_400);
            tracing::warn!(
                file = %cert.source, not_after = %cert.not_after_text, days_left,
                "the refresh client certificate expires soon (or has expired); renew it with `ferrolb-bootstrap checkpoint init` on this node, then restart ferrolb-bootstrap (it reads the certificate at start)"
            );
        }
        // Set after the check, so a set gauge tells that the first check has run.
        metrics.client_certificate_expiry.set(cert.not_after);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn issues_a_client_certificate_chaining_to_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "kubernetes");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        fs::write(dir.path().join("ca.crt"), ca_cert.pem()).unwrap();
        fs::write(dir.path().join("ca.key"), ca_key.serialize_pem()).unwrap();
        let req = Request {
            node: "cp1".into(),
            ca_cert: dir.path().join("ca.crt"),
            ca_key: dir.path().join("ca.key"),
            dir: dir.path().join("out"),
            server: "https://127.0.0.1:6443".into(),
            tls_server_name: "kubernetes".into(),
            days: 365,
        };
        let w = write(&req).unwrap();
        for f in [&w.kubeconfig, &w.key] {
            assert_eq!(fs::metadata(f).unwrap().permissions().mode() & 0o777, 0o600, "{}", f.display());
        }
        use rustls_pki_types::pem::PemObject;
        let der = rustls_pki_types::CertificateDer::from_pem_file(&w.cert).unwrap();
        let text = String::from_utf8_lossy(der.as_ref()).into_owned();
        assert!(text.contains("system:ferrolb-bootstrap:cp1") && text.contains(GROUP), "subject");
        // The certificate verifies as a client certificate against the CA.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(rustls_pki_types::CertificateDer::from(ca_cert.der().to_vec())).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
            .build()
            .unwrap();
        verifier.verify_client_cert(&der, &[], rustls_pki_types::UnixTime::now()).unwrap();
        // The kubeconfig parses and points at the local apiserver with the kubernetes TLS name.
        let kc = kube::config::Kubeconfig::read_from(&w.kubeconfig).unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(cluster.tls_server_name.as_deref(), Some("kubernetes"));
    }
}
