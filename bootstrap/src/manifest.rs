//! The static pod manifest printed by `ferrolb-bootstrap manifest`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, HTTPGetAction, HostPathVolumeSource, ObjectFieldSelector,
    Pod, PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Defaults of the `manifest` flags.
pub mod defaults {
    /// Where `checkpoint init` writes and `run` reads.
    pub const CHECKPOINT: &str = "/etc/ferrolb/bootstrap/checkpoint.yaml";
    /// The host directory mounted into the pod (checkpoint, kubeconfig, keys, BGP passwords).
    pub const CONFIG_DIR: &str = "/etc/ferrolb";
    /// The cluster CA verifying the local apiserver.
    pub const CA_FILE: &str = "/etc/kubernetes/pki/ca.crt";
    /// Metrics, liveness and readiness endpoint (`--metrics-addr`), on loopback only.
    pub const METRICS_ADDR: &str = "127.0.0.1:7949";
}

/// What the pod is made of.
#[derive(Debug, Clone)]
pub struct Options {
    /// Container image.
    pub image: String,
    /// Checkpoint path inside `config_dir`.
    pub checkpoint: String,
    /// Host directory mounted at the same path.
    pub config_dir: String,
    /// CA file mounted read-only at the same path.
    pub ca_file: String,
    /// `host:port` of the metrics and health endpoint.
    pub metrics_addr: String,
    /// `text` or `json`.
    pub log_format: String,
    /// RUST_LOG for the container.
    pub log_level: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            image: format!("example.invalid/ferrolb:{}", env!("CARGO_PKG_VERSION")),
            checkpoint: defaults::CHECKPOINT.into(),
            config_dir: defaults::CONFIG_DIR.into(),
            ca_file: defaults::CA_FILE.into(),
            metrics_addr: defaults::METRICS_ADDR.into(),
            log_format: "text".into(),
            log_level: "info".into(),
        }
    }
}

fn host_path(name: &str, path: &str, kind: &str) -> Volume {
    Volume {
        name: name.into(),
        host_path: Some(HostPathVolumeSource { path: path.into(), type_: Some(kind.into()) }),
        ..Default::default()
    }
}

fn probe(host: &str, port: i32, path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            host: Some(host.into()),
            port: IntOrString::Int(port),
            path: Some(path.into()),
            scheme: Some("HTTP".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(2),
        failure_threshold: Some(failures),
        ..Default::default()
    }
}

/// The static pod.
pub fn pod(o: &Options) -> Pod {
    let (host, port) = o.metrics_addr.rsplit_once(':').unwrap_or(("127.0.0.1", "7949"));
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: i32 = port.parse().unwrap_or(7949);
    let labels = BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "ferrolb".to_string()),
        ("app.kubernetes.io/component".to_string(), "bootstrap".to_string()),
    ]);
    let container = Container {
        name: "ferrolb-bootstrap".into(),
        image: Some(o.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["/usr/local/bin/ferrolb-bootstrap".into()]),
        args: Some(vec![
            "run".into(),
            format!("--checkpoint={}", o.checkpoint),
            "--node-name=$(NODE_NAME)".into(),
            format!("--metrics-addr={}", o.metrics_addr),
            format!("--log-format={}", o.log_format),
        ]),
        env: Some(vec![
            EnvVar {
                name: "NODE_NAME".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "spec.nodeName".into(),
                        api_version: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            EnvVar { name: "RUST_LOG".into(), value: Some(o.log_level.clone()), ..Default::default() },
        ]),
        security_context: Some(SecurityContext {
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_ADMIN".into(), "NET_RAW".into()]),
                drop: Some(vec!["ALL".into()]),
            }),
            // Root for the two capabilities only: Kubernetes grants added capabilities to
            // root, and the image's default user is not root.
            run_as_user: Some(0),
            run_as_non_root: Some(false),
            privileged: Some(false),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            ..Default::default()
        }),
        liveness_probe: Some(probe(host, port, "/healthz", 10, 3)),
        readiness_probe: Some(probe(host, port, "/readyz", 5, 3)),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("20m".into())),
                ("memory".to_string(), Quantity("32Mi".into())),
            ])),
            limits: Some(BTreeMap::from([("memory".to_string(), Quantity("128Mi".into()))])),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount { name: "ferrolb".into(), mount_path: o.config_dir.clone(), ..Default::default() },
            VolumeMount {
                name: "kubernetes-ca".into(),
                mount_path: o.ca_file.clone(),
                read_only: Some(true),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some("ferrolb-bootstrap".into()),
            namespace: Some("kube-system".into()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(PodSpec {
            host_network: Some(true),
            priority_class_name: Some("system-node-critical".into()),
            termination_grace_period_seconds: Some(30),
            security_context: Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            containers: vec![container],
            volumes: Some(vec![
                host_path("ferrolb", &o.config_dir, "DirectoryOrCreate"),
                host_path("kubernetes-ca", &o.ca_file, "File"),
            ]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The pod as YAML, with apiVersion and kind.
pub fn render(o: &Options) -> Result<String, String> {
    let mut v = serde_json::to_value(pod(o)).map_err(|e| e.to_string())?;
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
    let header =
        "# ferrolb-bootstrap static pod: copy to /etc/kubernetes/manifests/ on each control-plane node.\n";
    serde_saphyr::to_string(&v).map(|y| format!("{header}{y}")).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_printed_yaml_is_a_pod_with_exactly_net_admin_and_net_raw() {
        let text = render(&Options::default()).unwrap();
        let v: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "Pod");
        let pod: Pod = serde_json::from_value(v).unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.host_network, Some(true));
        assert_eq!(spec.priority_class_name.as_deref(), Some("system-node-critical"));
        assert_eq!(spec.containers.len(), 1);
        let c = &spec.containers[0];
        let caps = c.security_context.as_ref().unwrap().capabilities.as_ref().unwrap();
        let mut add = caps.add.clone().unwrap();
        add.sort();
        assert_eq!(add, vec!["NET_ADMIN", "NET_RAW"]);
        assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert_ne!(c.security_context.as_ref().unwrap().privileged, Some(true));
        // Probes hit the local health port the container is told to serve.
        let args = c.args.clone().unwrap();
        assert!(args.contains(&"--metrics-addr=127.0.0.1:7949".to_string()), "{args:?}");
        for p in [c.liveness_probe.as_ref().unwrap(), c.readiness_probe.as_ref().unwrap()] {
            let g = p.http_get.as_ref().unwrap();
            assert_eq!((g.host.as_deref(), &g.port), (Some("127.0.0.1"), &IntOrString::Int(7949)));
        }
        // The checkpoint directory is a hostPath mounted where --checkpoint points.
        let vols = spec.volumes.unwrap();
        let config = vols.iter().find(|v| v.name == "ferrolb").unwrap();
        assert_eq!(config.host_path.as_ref().unwrap().path, "/etc/ferrolb");
        let cp = args.iter().find_map(|a| a.strip_prefix("--checkpoint=")).unwrap();
        assert!(cp.starts_with("/etc/ferrolb/"));
        let mounts = c.volume_mounts.as_ref().unwrap();
        assert!(mounts.iter().any(|m| m.name == "ferrolb" && m.mount_path == "/etc/ferrolb"));
    }

    #[test]
    fn the_shipped_static_pod_file_is_what_manifest_prints() {
        // manifests/bootstrap/ holds the same pod with comments for readers; this keeps
        // the two from drifting apart.
        let shipped: serde_json::Value =
            serde_saphyr::from_str(include_str!("../../manifests/bootstrap/ferrolb-bootstrap.yaml")).unwrap();
        let printed: serde_json::Value =
            serde_saphyr::from_str(&render(&Options::default()).unwrap()).unwrap();
        assert_eq!(shipped, printed);
    }
}
