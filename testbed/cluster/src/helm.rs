//! ferrolb installed by its Helm chart (`manifests/helm/ferrolb`) on the real control
//! plane, with the real helm that `testbed/kube/build.sh` builds beside `ferrolb-kube`.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::Cluster;
use super::ferrolb::{NAMESPACE, wait_crds};
use ferrolb_lab::Error;

/// The release name the lab installs.
pub const RELEASE: &str = "ferrolb";

/// `helm`, beside `ferrolb-kube` (`$HELM_BIN` overrides).
pub fn binary() -> Result<PathBuf, Error> {
    ferrolb_lab::binary::built_by_kube_build("helm")
}

/// The chart of this workspace.
pub fn chart_dir() -> PathBuf {
    ferrolb_lab::binary::workspace_root().join(ferrolb_release::chart::CHART_DIR)
}

/// A helm command that keeps its cache and configuration in `home` (never the user's).
pub fn command(home: &Path) -> Result<Command, Error> {
    let mut cmd = Command::new(binary()?);
    for (var, sub) in
        [("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")]
    {
        cmd.env(var, home.join(sub));
    }
    Ok(cmd)
}

/// Runs `helm ARGS` (offline: lint, template, show).
pub fn run(home: &Path, args: &[&str]) -> Result<String, Error> {
    let mut cmd = command(home)?;
    cmd.args(args);
    ferrolb_lab::netns::run(&mut cmd)
}

impl Cluster {
    /// Runs `helm ARGS` against this cluster, as its admin.
    pub fn helm(&self, args: &[&str]) -> Result<String, Error> {
        let mut cmd = command(&self.paths.dir.join("helm"))?;
        cmd.arg("--kubeconfig").arg(self.paths.admin_kubeconfig()).args(args);
        ferrolb_lab::netns::run(&mut cmd)
    }
}

/// `helm install ferrolb manifests/helm/ferrolb -n ferrolb-system --create-namespace
/// --set …`, then waits until every ferrolb CRD is Established. Returns helm's output.
pub fn install(cluster: &Cluster, sets: &[&str]) -> Result<String, Error> {
    let chart = chart_dir().display().to_string();
    let mut args = vec!["install", RELEASE, &chart, "--namespace", NAMESPACE, "--create-namespace"];
    args.extend(sets.iter().flat_map(|s| ["--set", s]));
    let out = cluster.helm(&args)?;
    wait_crds(cluster)?;
    Ok(out)
}

/// `helm upgrade ferrolb manifests/helm/ferrolb --reuse-values --set …`.
pub fn upgrade(cluster: &Cluster, sets: &[&str]) -> Result<String, Error> {
    let chart = chart_dir().display().to_string();
    let mut args = vec!["upgrade", RELEASE, &chart, "--namespace", NAMESPACE, "--reuse-values"];
    args.extend(sets.iter().flat_map(|s| ["--set", s]));
    cluster.helm(&args)
}

/// Marks the objects the chart renders with `sets` (installed some other way, e.g. by
/// `kubectl apply -k`) as the release's, so that `helm install` takes them over: the
/// README's two commands (`helm template … | kubectl annotate -f -`, `… | kubectl label
/// -f -`).
pub fn adopt(cluster: &Cluster, sets: &[&str]) -> Result<(), Error> {
    let chart = chart_dir().display().to_string();
    let mut args = vec!["template", RELEASE, &chart, "--namespace", NAMESPACE];
    args.extend(sets.iter().flat_map(|s| ["--set", s]));
    let objects = cluster.helm(&args)?;
    let name = format!("meta.helm.sh/release-name={RELEASE}");
    let namespace = format!("meta.helm.sh/release-namespace={NAMESPACE}");
    cluster.kubectl_stdin(&["annotate", "--overwrite", "-f", "-", &name, &namespace], &objects)?;
    cluster
        .kubectl_stdin(&["label", "--overwrite", "-f", "-", "app.kubernetes.io/managed-by=Helm"], &objects)?;
    Ok(())
}
