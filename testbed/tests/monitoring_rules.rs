//! The monitoring that ships with ferrolb (manifests/components/monitoring): the alert
//! rules pass `promtool check rules` and their unit tests (`promtool test rules`: each
//! alert fires on recorded failures and stays quiet on healthy series), the
//! PrometheusRule holds exactly the plain rule file, every `ferrolb_*` name in the rules
//! and the dashboard is one the binaries export, and the component renders on the base
//! with Services that reach the pods' metrics ports.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Set to rewrite prometheusrule.yaml from the rule file.
const WRITE_ENV: &str = "FERROLB_WRITE_RULES";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn component() -> PathBuf {
    repo().join("manifests/components/monitoring")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn run(cmd: &mut Command, what: &str) -> Output {
    cmd.output().unwrap_or_else(|e| {
        panic!("cannot run {what}: {e}; run `bash testbed/prereqs.sh` (it installs the test tools)")
    })
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("invalid YAML: {e}\n{text}"))
}

/// The documents of a YAML stream (empty ones dropped).
fn documents(text: &str) -> Vec<Value> {
    ferrolb_api::json_documents(text).unwrap_or_else(|e| panic!("invalid YAML: {e}\n{text}"))
}

/// `promtool ARGS` in the rules folder; fails the test with promtool's output.
fn promtool(args: &[&str]) {
    let out = run(Command::new("promtool").args(args).current_dir(component().join("rules")), "promtool");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    println!("promtool {}:\n{text}", args.join(" "));
}

#[test]
fn rules_pass_promtool_check_and_their_unit_tests() {
    promtool(&["check", "rules", "ferrolb.rules.yaml"]);
    promtool(&["test", "rules", "ferrolb.rules.test.yaml"]);
}

/// prometheusrule.yaml as made from the plain rule file: its groups under `spec`.
fn prometheus_rule(rules: &str) -> String {
    let mut out = String::from(
        "# Generated from rules/ferrolb.rules.yaml; do not edit. Rewrite it with\n\
         # `FERROLB_WRITE_RULES=1 cargo test -p ferrolb-testbed --test monitoring_rules`.\n\
         apiVersion: monitoring.coreos.com/v1\n\
         kind: PrometheusRule\n\
         metadata:\n  name: ferrolb\n  namespace: ferrolb-system\n  labels:\n    app.kubernetes.io/name: ferrolb\n\
         spec:\n",
    );
    // The file's leading comment is about the file; the rest is the groups.
    for line in rules.lines().skip_while(|l| l.starts_with('#')) {
        if !line.is_empty() {
            out.push_str("  ");
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[test]
fn prometheus_rule_holds_the_rule_file() {
    let rules = read(&component().join("rules/ferrolb.rules.yaml"));
    let want = prometheus_rule(&rules);
    let path = component().join("prometheusrule.yaml");
    if std::env::var_os(WRITE_ENV).is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} differs from rules/ferrolb.rules.yaml: rewrite it with `{WRITE_ENV}=1 cargo test -p ferrolb-testbed --test monitoring_rules`",
        path.display()
    );
    // The same data, not only the same text.
    assert_eq!(yaml(&have)["spec"], yaml(&rules));
    assert_eq!(yaml(&have)["kind"], "PrometheusRule");
}

/// Suffixes a family's samples add to its name, by type (OpenMetrics).
const SAMPLE_SUFFIXES: &[&str] = &["_total", "_info", "_bucket", "_sum", "_count", "_created"];

/// The family names (`# TYPE` lines) and sample names of the exposition `text`.
fn exposition_names(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut families, mut samples) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            families.insert(rest.split(' ').next().unwrap().to_owned());
        } else if !line.starts_with('#') && !line.is_empty() {
            samples.insert(line.split(['{', ' ']).next().unwrap().to_owned());
        }
    }
    (families, samples)
}

/// The string literal right after each `marker` in `text` (`register(\n "name", ...`).
fn literals_after<'t>(text: &'t str, marker: &str) -> Vec<&'t str> {
    text.match_indices(marker)
        .filter_map(|(i, _)| {
            let rest = text[i + marker.len()..].trim_start().strip_prefix('"')?;
            Some(&rest[..rest.find('"')?])
        })
        .collect()
}

/// The metric names the binaries' sources register, with the prefixes of the registries
/// they register into: a family with labels shows in no exposition before its first use.
fn registered_names() -> BTreeSet<String> {
    let mut files = Vec::new();
    let mut dirs: Vec<PathBuf> = ["speaker/src", "controller/src", "bootstrap/src", "proto/src"]
        .iter()
        .map(|d| repo().join(d))
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(read(&path));
            }
        }
    }
    let mut prefixes = BTreeSet::from([String::new()]);
    let mut names = Vec::new();
    for text in &files {
        prefixes
            .extend(literals_after(text, "sub_registry_with_prefix(").into_iter().map(|p| format!("{p}_")));
        names.extend(literals_after(text, ".register("));
        names.extend(literals_after(text, ".register_with_unit("));
    }
    prefixes.iter().flat_map(|p| names.iter().map(move |n| format!("{p}{n}"))).collect()
}

/// The `ferrolb_*` names in `text`.
fn ferrolb_names(text: &str) -> BTreeSet<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("ferrolb_") {
        let before = rest[..i].chars().next_back();
        let name: String = rest[i..].chars().take_while(|&c| word(c)).collect();
        if !before.is_some_and(word) {
            names.insert(name.clone());
        }
        rest = &rest[i + name.len()..];
    }
    names
}

#[test]
fn every_metric_named_is_exported_by_a_binary() {
    let binaries = [
        ("ferrolb-speaker", ferrolb_speaker::metrics::Metrics::new().encode()),
        ("ferrolb-controller", ferrolb_controller::metrics::Metrics::new().encode()),
        ("ferrolb-bootstrap", ferrolb_bootstrap::metrics::Metrics::new().encode()),
    ];
    let (mut families, mut samples) = (BTreeSet::new(), BTreeSet::new());
    for (binary, text) in &binaries {
        let (f, s) = exposition_names(text);
        assert!(s.contains("ferrolb_build_info"), "{binary} exports no ferrolb_build_info:\n{text}");
        families.extend(f);
        samples.extend(s);
    }
    let registered = registered_names();
    // Exported: a sample of the expositions, or else a family registered in the sources
    // that has no series yet (it has labels), with its type's suffix. A family the
    // expositions show must be named as they show it: `_total` on a gauge is wrong.
    let exported = |name: &String| {
        let base = SAMPLE_SUFFIXES.iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
        samples.contains(name)
            || (!families.contains(base) && !families.contains(name) && registered.contains(base))
    };
    for file in ["rules/ferrolb.rules.yaml", "rules/ferrolb.rules.test.yaml", "dashboards/ferrolb.json"] {
        let named = ferrolb_names(&read(&component().join(file)));
        assert!(named.len() >= 5, "{file}: {named:?}");
        let unknown: Vec<&String> = named.iter().filter(|n| !exported(n)).collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics no binary exports: {unknown:?}\nexposed: {samples:?}\nregistered: {registered:?}"
        );
    }
}

#[test]
fn the_dashboard_queries_prometheus_through_its_datasource_variable() {
    let dashboard: Value = serde_json::from_str(&read(&component().join("dashboards/ferrolb.json"))).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let mut queries = 0;
    for p in panels.iter().filter(|p| p["type"] != "row") {
        assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {}", p["title"]);
        for t in p["targets"].as_array().unwrap() {
            assert!(t["expr"].as_str().is_some_and(|e| e.contains("ferrolb_")), "panel {}: {t}", p["title"]);
            queries += 1;
        }
    }
    assert!(queries >= 20, "{queries} queries");
    let ids: BTreeSet<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
}

/// `kubectl kustomize` of the base with the monitoring components.
fn render_with_monitoring() -> Vec<Value> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("monitoring-overlay");
    std::fs::create_dir_all(&dir).unwrap();
    // Kustomize takes bases by relative path only.
    let dir = std::fs::canonicalize(&dir).unwrap();
    let manifests = std::fs::canonicalize(repo().join("manifests")).unwrap();
    let common = dir.ancestors().find(|a| manifests.starts_with(a)).unwrap();
    let up = dir.strip_prefix(common).unwrap().components().map(|_| "..").collect::<Vec<_>>().join("/");
    let m = format!("{up}/{}", manifests.strip_prefix(common).unwrap().display());
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- {m}/base\n\
             components:\n- {m}/components/monitoring\n- {m}/components/monitoring/bootstrap\n"
        ),
    )
    .unwrap();
    let out = run(Command::new("kubectl").arg("kustomize").arg(&dir), "kubectl");
    assert!(out.status.success(), "kubectl kustomize:\n{}", String::from_utf8_lossy(&out.stderr));
    documents(&String::from_utf8(out.stdout).unwrap())
}

/// Whether `labels` satisfy a LabelSelector (matchLabels, and matchExpressions `In`).
fn selects(selector: &Value, labels: &Value) -> bool {
    let by_label = selector["matchLabels"].as_object().into_iter().flatten().all(|(k, v)| labels[k] == *v);
    let by_expression = selector["matchExpressions"].as_array().into_iter().flatten().all(|e| {
        assert_eq!(e["operator"], "In", "{e}");
        e["values"].as_array().unwrap().contains(&labels[e["key"].as_str().unwrap()])
    });
    by_label && by_expression
}

/// The port a ferrolb container serves /metrics on, from its `--metrics-addr=` argument.
fn metrics_port(container: &Value) -> u64 {
    let args = container["args"].as_array().unwrap();
    let addr = args.iter().find_map(|a| a.as_str()?.strip_prefix("--metrics-addr=")).unwrap();
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn metrics_services_and_service_monitors_reach_every_metrics_port() {
    let objects = render_with_monitoring();
    let of_kind = |kind: &'static str| objects.iter().filter(move |o| o["kind"] == kind);
    let monitors: Vec<&Value> = of_kind("ServiceMonitor").collect();
    assert_eq!(monitors.len(), 2, "ferrolb's and bootstrap's ServiceMonitors");
    // The workloads, and bootstrap's static pod (its mirror pod carries its labels).
    let static_pod = documents(&read(&repo().join("manifests/bootstrap/ferrolb-bootstrap.yaml"))).remove(0);
    let mut pods: Vec<(String, Value)> = of_kind("Deployment")
        .chain(of_kind("DaemonSet"))
        .map(|w| (w["metadata"]["name"].as_str().unwrap().to_owned(), w["spec"]["template"].clone()))
        .collect();
    pods.push(("ferrolb-bootstrap".into(), static_pod));
    assert_eq!(pods.len(), 3);
    for (name, template) in &pods {
        let ns = if name == "ferrolb-bootstrap" { "kube-system" } else { "ferrolb-system" };
        let labels = &template["metadata"]["labels"];
        let services: Vec<&Value> = of_kind("Service")
            .filter(|s| s["metadata"]["namespace"] == ns)
            .filter(|s| s["spec"]["selector"].as_object().unwrap().iter().all(|(k, v)| labels[k] == *v))
            .collect();
        assert_eq!(services.len(), 1, "{name}: one metrics Service selects its pods");
        let service = services[0];
        let container = &template["spec"]["containers"][0];
        let port = metrics_port(container);
        let sp = &service["spec"]["ports"][0];
        assert_eq!(sp["port"], port, "{name}: the Service's port is --metrics-addr's");
        match &sp["targetPort"] {
            Value::String(named) => {
                let cp = container["ports"].as_array().unwrap().iter().find(|p| p["name"] == *named).unwrap();
                assert_eq!(cp["containerPort"], port, "{name}: port {named} is --metrics-addr's");
            }
            target => assert_eq!(*target, port, "{name}"),
        }
        // Exactly one ServiceMonitor scrapes it, on that port, in its namespace.
        let scraping: Vec<&&Value> = monitors
            .iter()
            .filter(|m| selects(&m["spec"]["selector"], &service["metadata"]["labels"]))
            .filter(|m| m["spec"]["namespaceSelector"]["matchNames"].as_array().unwrap().contains(&ns.into()))
            .collect();
        assert_eq!(scraping.len(), 1, "{name}: one ServiceMonitor selects {}", service["metadata"]["name"]);
        assert_eq!(scraping[0]["spec"]["endpoints"][0]["port"], sp["name"], "{name}");
    }
    // Bootstrap listens on loopback unless told otherwise: what the component's comment says.
    let bootstrap = &pods[2].1["spec"]["containers"][0];
    assert!(bootstrap["args"].as_array().unwrap().contains(&"--metrics-addr=127.0.0.1:7949".into()));
    assert!(read(&component().join("bootstrap/kustomization.yaml")).contains("--metrics-addr 0.0.0.0:7949"));

    let rule = of_kind("PrometheusRule").next().expect("the PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "ferrolb-system");
    let dashboard =
        of_kind("ConfigMap").find(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1").unwrap();
    assert_eq!(dashboard["metadata"]["namespace"], "ferrolb-system");
    let json: Value = serde_json::from_str(dashboard["data"]["ferrolb.json"].as_str().unwrap()).unwrap();
    assert_eq!(json["uid"], "ferrolb-overview");
}
