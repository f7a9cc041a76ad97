//! The chart's values: one table from which `values.yaml`, `values.schema.json` and the
//! README's values table are written, so the three cannot disagree.

use serde_json::{Value, json};

/// One settable value.
pub(super) struct Setting {
    /// Dotted path under `.Values`.
    pub path: &'static str,
    /// Its JSON schema (without the description, added from [`Setting::help`]).
    pub schema: Value,
    /// Its default; `None` when it is the block [`super::edits`] lifts out of the
    /// kustomize base (the base's own text is then the default).
    pub default: Option<Value>,
    /// What it does, for `values.yaml`, the schema and the README.
    pub help: &'static str,
}

/// A top-level group of settings.
pub(super) struct Section {
    pub key: &'static str,
    pub help: &'static str,
}

/// Kubernetes object names (DNS-1123 subdomains).
const NAME: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A boolean setting.
fn flag(path: &'static str, default: bool, help: &'static str) -> Setting {
    Setting { path, schema: json!({"type": "boolean"}), default: Some(json!(default)), help }
}

fn string_map() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}})
}

fn resources() -> Value {
    let quantities =
        json!({"type": "object", "additionalProperties": {"type": ["string", "integer", "number"]}});
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": {"requests": quantities, "limits": quantities, "claims": {"type": "array"}},
    })
}

fn log_level() -> Value {
    json!({"type": "string", "maxLength": 512, "pattern": "^[A-Za-z0-9_:=,.\\[\\]{}\"-]*$"})
}

fn extra_args() -> Value {
    json!({"type": "array", "items": {"type": "string", "pattern": "^--[a-z]"}})
}

/// The sections, in the order `values.yaml` lists them.
pub(super) const SECTIONS: &[Section] = &[
    Section { key: "image", help: "The ferrolb image: every component runs from it." },
    Section { key: "l2", help: "L2 announcements (ARP / NDP), as components/l2 installs them." },
    Section { key: "bgp", help: "BGP announcements, as components/bgp installs them." },
    Section { key: "controller", help: "ferrolb-controller: assigns addresses to LoadBalancer Services." },
    Section { key: "speaker", help: "ferrolb-speaker: one per node, announcing the addresses." },
    Section { key: "bootstrap", help: "The apiserver VIP static pods (installed apart from the chart)." },
    Section { key: "viewer", help: "The ferrolb-viewer ClusterRole." },
    Section { key: "monitoring", help: "For the Prometheus Operator, as components/monitoring installs it." },
];

/// Every setting, grouped by section in [`SECTIONS`] order.
pub(super) fn settings() -> Vec<Setting> {
    vec![
        Setting {
            path: "image.repository",
            schema: json!({"type": "string", "minLength": 1, "pattern": "^[^:@\\s]+(:[0-9]+)?(/[^:@\\s]+)*$"}),
            default: Some(json!("example.invalid/ferrolb")),
            help: "Image repository, without a tag. No image is published yet: build one from the repository's \
                   Dockerfile and push it to your registry.",
        },
        Setting {
            path: "image.tag",
            schema: json!({"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$|^$"}),
            default: Some(json!("")),
            help: "Image tag; empty for the chart's appVersion.",
        },
        Setting {
            path: "image.pullPolicy",
            schema: json!({"enum": ["", "Always", "IfNotPresent", "Never"]}),
            default: Some(json!("")),
            help: "imagePullPolicy of every container; empty for Kubernetes' default.",
        },
        Setting {
            path: "imagePullSecrets",
            schema: json!({"type": "array", "items": {
                "type": "object", "required": ["name"], "additionalProperties": false,
                "properties": {"name": {"type": "string", "pattern": NAME}}}}),
            default: Some(json!([])),
            help: "Secrets to pull the image with, e.g. `[{name: regcred}]`.",
        },
        flag(
            "l2.enabled",
            true,
            "Let the speakers read their membership key and declare the membership port (UDP 7946).",
        ),
        flag("bgp.enabled", true, "Let the speakers read the BGP password Secrets below."),
        Setting {
            path: "bgp.passwordSecrets",
            schema: json!({"type": "array", "uniqueItems": true,
                "items": {"type": "string", "pattern": NAME, "maxLength": 253}}),
            default: Some(json!(["bgp-auth"])),
            help: "The Secrets in the release namespace that BGPPeers' spec.passwordSecret name; the speakers may \
                   read these and no other. Empty (`--set-json bgp.passwordSecrets=[]`): no BGP passwords, and no Role \
                   at all.",
        },
        Setting {
            path: "controller.replicas",
            schema: json!({"type": "integer", "minimum": 1, "maximum": 9}),
            default: Some(json!(2)),
            help: "Controller replicas: one leader, the others wait to take over.",
        },
        Setting {
            path: "controller.resources",
            schema: resources(),
            default: None,
            help: "The controller container's resources.",
        },
        Setting {
            path: "controller.logLevel",
            schema: log_level(),
            default: Some(json!("")),
            help: "The controller's RUST_LOG (e.g. `debug`, `info,ferrolb_controller=debug`); empty for `info`.",
        },
        Setting {
            path: "controller.extraArgs",
            schema: extra_args(),
            default: Some(json!([])),
            help: "Flags appended to the controller's (`ferrolb-controller --help`).",
        },
        Setting {
            path: "speaker.resources",
            schema: resources(),
            default: None,
            help: "The speaker container's resources.",
        },
        Setting {
            path: "speaker.logLevel",
            schema: log_level(),
            default: Some(json!("")),
            help: "The speaker's RUST_LOG; empty for `info`.",
        },
        Setting {
            path: "speaker.extraArgs",
            schema: extra_args(),
            default: Some(json!([])),
            help: "Flags appended to the speaker's (`ferrolb-speaker --help`), e.g. `--drain-max-delay=60s`.",
        },
        Setting {
            path: "speaker.nodeSelector",
            schema: string_map(),
            default: None,
            help: "Nodes that run a speaker (only they announce).",
        },
        Setting {
            path: "speaker.tolerations",
            schema: json!({"type": "array", "items": {"type": "object"}}),
            default: None,
            help: "The speaker's tolerations: by default it runs on control-plane nodes too.",
        },
        flag(
            "bootstrap.rbac",
            true,
            "Install the read-only role the ferrolb-bootstrap static pods use (group ferrolb.io:bootstrap). \
                   Set false where `ferrolb-bootstrap checkpoint rbac` applied the same two objects before the \
                   chart (the apiserver VIP recipe does): Helm refuses to take over objects it did not create.",
        ),
        flag(
            "viewer.enabled",
            true,
            "Install ferrolb-viewer, read-only for people and `kubectl ferrolb`; bind it yourself.",
        ),
        flag(
            "monitoring.enabled",
            false,
            "Metrics Services, a ServiceMonitor, the alerts (PrometheusRule) and the Grafana dashboard \
                   (a ConfigMap labelled grafana_dashboard). Needs the Prometheus Operator's CRDs.",
        ),
        Setting {
            path: "monitoring.labels",
            schema: string_map(),
            default: Some(json!({})),
            help: "Labels added to the ServiceMonitors and the PrometheusRule, e.g. `{release: kube-prometheus-stack}` \
                   for kube-prometheus-stack's selectors.",
        },
        flag(
            "monitoring.bootstrap",
            false,
            "Also scrape the apiserver VIP static pods (in kube-system), once they serve metrics beyond \
                   loopback (`ferrolb-bootstrap manifest --metrics-addr 0.0.0.0:7949`).",
        ),
    ]
}
