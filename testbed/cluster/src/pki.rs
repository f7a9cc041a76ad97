//! The kubeadm-shaped PKI of a cluster (CA, serving and ServiceAccount pairs, client
//! pairs) and the kubeconfigs that authenticate with its client pairs.

use std::path::Path;

use super::{Paths, VIP_V4};
use ferrolb_lab::https::TestCa;
use ferrolb_lab::{Error, addressing};

/// Writes the kubeadm-shaped PKI: CA, apiserver serving pair (names and addresses of
/// every control-plane node, the VIP, loopback, the first ClusterIPs), ServiceAccount
/// signing pair, and the client pairs of the admin and the controller-manager; returns
/// the CA.
pub(super) fn write_pki(
    paths: &Paths,
    control_planes: usize,
    extra_sans: &[String],
) -> Result<TestCa, Error> {
    let ca = TestCa::new()?;
    ca.write(&paths.pki)?;
    let mut names: Vec<String> = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "localhost",
        "127.0.0.1",
        "::1",
        "198.19.240.1",
        "2001:db8:ff::1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push(VIP_V4.to_string());
    for i in 1..=control_planes {
        names.push(addressing::node_name(i));
        names.push(addressing::node_v4(i).to_string());
        names.push(addressing::node_v6(i).to_string());
    }
    names.extend(extra_sans.iter().cloned());
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (cert, key) = ca.serving_cert(&refs)?;
    std::fs::write(paths.pki.join("apiserver.crt"), cert)?;
    write_private(&paths.pki.join("apiserver.key"), &key)?;
    let sa = rcgen::KeyPair::generate().map_err(|e| Error::Parse(format!("ServiceAccount key: {e}")))?;
    write_private(&paths.pki.join("sa.key"), &sa.serialize_pem())?;
    std::fs::write(paths.pki.join("sa.pub"), sa.public_key_pem())?;
    for (file, cn, org) in [
        ("admin", "kubernetes-admin", Some("system:masters")),
        ("controller-manager", "system:kube-controller-manager", None),
        ("scheduler", "system:kube-scheduler", None),
        ("kube-proxy", "system:kube-proxy", None),
        // kubeadm's apiserver-kubelet-client: what a real kubelet's x509 authn sees on
        // logs/exec/port-forward.
        ("apiserver-kubelet-client", "kube-apiserver-kubelet-client", Some("kubeadm:cluster-admins")),
    ] {
        write_client_pair(paths, &ca, file, cn, org)?;
    }
    Ok(ca)
}

/// Writes `pki/<file>.{crt,key}`: a client pair for user `cn` in group `org`.
pub(super) fn write_client_pair(
    paths: &Paths,
    ca: &TestCa,
    file: &str,
    cn: &str,
    org: Option<&str>,
) -> Result<(), Error> {
    let (cert, key) = ca.client_cert(cn, org)?;
    std::fs::write(paths.pki.join(format!("{file}.crt")), cert)?;
    write_private(&paths.pki.join(format!("{file}.key")), &key)
}

fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(path)?;
    std::io::Write::write_all(&mut f, text.as_bytes())?;
    Ok(())
}

/// A kubeconfig authenticating with the client pair `pki/<pair>.{crt,key}`.
pub(super) fn write_cert_kubeconfig(
    paths: &Paths,
    path: &Path,
    server: &str,
    user: &str,
    pair: &str,
) -> Result<(), Error> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: {server}\n    \
         certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate: {crt}\n    \
         client-key: {key}\ncontexts:\n- name: lab\n  context:\n    cluster: lab\n    user: {user}\n\
         current-context: lab\n",
        ca = paths.ca_cert().display(),
        crt = paths.pki.join(format!("{pair}.crt")).display(),
        key = paths.pki.join(format!("{pair}.key")).display(),
    );
    std::fs::write(path, text)?;
    Ok(())
}
