//! The Helm chart (issue #42), offline: generated from the kustomize sources and up to
//! date with them; `helm lint --strict` clean; `helm template` renders, object for
//! object, what `kubectl kustomize` renders for each overlay (the Namespace aside: Helm
//! installs into an existing one); each value changes what it says; bad values are
//! refused by the schema, naming the value.
//!
//! Needs `target/kube/current/helm` (testbed/kube/build.sh builds it) and kubectl with
//! kustomize v5 (testbed/prereqs.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use ferrolb_cluster::helm;
use ferrolb_release::chart;
use serde_json::Value;

fn repo() -> PathBuf {
    ferrolb_lab::binary::workspace_root()
}

fn home() -> PathBuf {
    // Under target/ (Cargo's directory for integration tests' files), never the user's.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("helm-chart");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `helm template` of the chart with `sets`, CRDs included: the objects, or helm's error.
fn template(sets: &[&str]) -> Result<Vec<Value>, String> {
    template_text(sets).map(|t| documents(&t))
}

/// `helm template` as helm prints it.
fn template_text(sets: &[&str]) -> Result<String, String> {
    let chart = helm::chart_dir().display().to_string();
    let mut args = vec!["template", "ferrolb", &chart, "--namespace", "ferrolb-system", "--include-crds"];
    for s in sets {
        // A whole flag (`--set-json=…`) as it is; otherwise a `--set`.
        if s.starts_with("--") {
            args.push(s);
        } else {
            args.extend(["--set", s]);
        }
    }
    helm::run(&home(), &args).map_err(|e| e.to_string())
}

fn documents(text: &str) -> Vec<Value> {
    ferrolb_api::json_documents(text).unwrap_or_else(|e| panic!("invalid YAML: {e}\n{text}"))
}

/// `kubectl kustomize` of a kustomization made of the base and `components`.
fn kustomize(components: &[&str]) -> Vec<Value> {
    let dir = home().join(format!("k-{}", components.join("-").replace('/', "_")));
    std::fs::create_dir_all(&dir).unwrap();
    let manifests = repo().join("manifests");
    let mut k = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- {}\ncomponents:\n",
        relative(&dir, &manifests.join("base"))
    );
    for c in components {
        k.push_str(&format!("- {}\n", relative(&dir, &manifests.join("components").join(c))));
    }
    std::fs::write(dir.join("kustomization.yaml"), k).unwrap();
    let out =
        Command::new("kubectl").arg("kustomize").arg(&dir).output().expect("kubectl (testbed/prereqs.sh)");
    assert!(out.status.success(), "kubectl kustomize: {}", String::from_utf8_lossy(&out.stderr));
    documents(&String::from_utf8(out.stdout).unwrap())
}

/// `text` read and written again by kustomize, as [`kustomize`]'s are: the same Go
/// YAML parser the apiserver uses reads the chart's text (which keeps the sources'
/// folded scalars), and the same serializer writes both sides.
fn normalized(text: &str) -> Vec<Value> {
    let dir = home().join(format!("n-{}", std::thread::current().name().unwrap_or("t").replace(':', "_")));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("objects.yaml"), text).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- objects.yaml\n",
    )
    .unwrap();
    let out =
        Command::new("kubectl").arg("kustomize").arg(&dir).output().expect("kubectl (testbed/prereqs.sh)");
    assert!(out.status.success(), "kubectl kustomize: {}", String::from_utf8_lossy(&out.stderr));
    documents(&String::from_utf8(out.stdout).unwrap())
}

/// `to` as seen from `from` (kustomize takes relative paths only).
fn relative(from: &Path, to: &Path) -> String {
    let from = std::fs::canonicalize(from).unwrap();
    let to = std::fs::canonicalize(to).unwrap();
    format!(
        "{}{}",
        "../".repeat(from.components().count() - 1),
        to.display().to_string().trim_start_matches('/')
    )
}

fn key(o: &Value) -> String {
    let m = &o["metadata"];
    format!(
        "{} {} {}/{}",
        o["apiVersion"].as_str().unwrap_or("?"),
        o["kind"].as_str().unwrap_or("?"),
        m["namespace"].as_str().unwrap_or("-"),
        m["name"].as_str().unwrap_or("?")
    )
}

fn by_key(objects: Vec<Value>) -> BTreeMap<String, Value> {
    let mut map = BTreeMap::new();
    for o in objects {
        let k = key(&o);
        assert!(map.insert(k.clone(), o).is_none(), "{k} twice");
    }
    map
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

#[test]
fn the_chart_is_generated_from_the_kustomize_sources_and_up_to_date() {
    let stale = chart::stale(&repo()).unwrap();
    assert!(stale.is_empty(), "{} is stale: {stale:?}; run `{}`", chart::CHART_DIR, chart::REGENERATE);
}

#[test]
fn helm_lint_strict_passes() {
    let chart = helm::chart_dir().display().to_string();
    let out = helm::run(&home(), &["lint", "--strict", &chart]).unwrap();
    assert!(out.contains("1 chart(s) linted, 0 chart(s) failed"), "{out}");
}

#[test]
fn helm_renders_what_kustomize_renders_for_every_overlay() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["l2", "bgp"], &[]),
        (&["l2"], &["bgp.enabled=false"]),
        (&["bgp"], &["l2.enabled=false"]),
        (
            &["l2", "bgp", "monitoring", "monitoring/bootstrap"],
            &["monitoring.enabled=true", "monitoring.bootstrap=true"],
        ),
    ];
    for (components, sets) in cases {
        let mut want = by_key(kustomize(components));
        let ns = want.remove("v1 Namespace -/ferrolb-system");
        assert!(ns.is_some(), "the kustomize base creates the namespace");
        let got = by_key(normalized(&template_text(sets).unwrap()));
        let missing: Vec<&String> = want.keys().filter(|k| !got.contains_key(*k)).collect();
        let extra: Vec<&String> = got.keys().filter(|k| !want.contains_key(*k)).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{components:?} / {sets:?}: helm lacks {missing:?}, adds {extra:?}"
        );
        for (k, w) in &want {
            assert_eq!(&got[k], w, "{components:?} / {sets:?}: {k} differs");
        }
        println!("{components:?} = helm template {sets:?}: {} objects alike", want.len());
    }
    // The kustomize overlays users apply are those compositions.
    let l2_bgp =
        std::fs::read_to_string(repo().join("manifests/overlays/l2-bgp/kustomization.yaml")).unwrap();
    assert!(l2_bgp.contains("- ../../components/l2\n- ../../components/bgp\n"), "{l2_bgp}");
}

#[test]
fn each_value_changes_what_it_says() {
    let objects = template(&[
        "image.repository=registry.example/ferrolb",
        "image.tag=1.2.3",
        "image.pullPolicy=Always",
        "imagePullSecrets[0].name=regcred",
        "controller.replicas=3",
        "controller.logLevel=debug",
        "speaker.extraArgs={--drain-max-delay=60s}",
        "speaker.nodeSelector.rack=r1",
        "speaker.resources.limits.memory=512Mi",
        "bgp.passwordSecrets={bgp-auth,edge-auth}",
        "monitoring.enabled=true",
        "monitoring.labels.release=kube-prometheus-stack",
        "viewer.enabled=false",
        "bootstrap.rbac=false",
    ])
    .unwrap();
    let speaker = find(&objects, "DaemonSet", "ferrolb-speaker").unwrap();
    let controller = find(&objects, "Deployment", "ferrolb-controller").unwrap();
    for w in [speaker, controller] {
        let pod = &w["spec"]["template"]["spec"];
        assert_eq!(pod["containers"][0]["image"], "registry.example/ferrolb:1.2.3");
        assert_eq!(pod["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["imagePullSecrets"], serde_json::json!([{"name": "regcred"}]));
    }
    assert_eq!(controller["spec"]["replicas"], 3);
    let env = &controller["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array().unwrap().iter().any(|e| e["name"] == "RUST_LOG" && e["value"] == "debug"),
        "{env}"
    );
    let s = &speaker["spec"]["template"]["spec"];
    assert_eq!(s["containers"][0]["args"].as_array().unwrap().last().unwrap(), "--drain-max-delay=60s");
    assert_eq!(s["nodeSelector"]["rack"], "r1");
    assert_eq!(s["containers"][0]["resources"]["limits"]["memory"], "512Mi");
    let role = find(&objects, "Role", "ferrolb-speaker-bgp-passwords").unwrap();
    assert_eq!(role["rules"][0]["resourceNames"], serde_json::json!(["bgp-auth", "edge-auth"]));
    for (kind, name) in [("ServiceMonitor", "ferrolb"), ("PrometheusRule", "ferrolb")] {
        assert_eq!(
            find(&objects, kind, name).unwrap()["metadata"]["labels"]["release"],
            "kube-prometheus-stack"
        );
    }
    assert!(find(&objects, "ClusterRole", "ferrolb-viewer").is_none());
    assert!(find(&objects, "ClusterRole", "ferrolb-bootstrap").is_none());
    // The dashboard ConfigMap holds the dashboard as kustomize does, Grafana's `{{…}}` kept.
    let dashboard = find(&objects, "ConfigMap", "ferrolb-grafana-dashboard").unwrap();
    let json =
        std::fs::read_to_string(repo().join("manifests/components/monitoring/dashboards/ferrolb.json"))
            .unwrap();
    assert_eq!(dashboard["data"]["ferrolb.json"], json.as_str());

    // No password Secrets: no Role at all, never one with empty resourceNames (which
    // would grant every Secret in the namespace).
    let objects = template(&["--set-json=bgp.passwordSecrets=[]"]).unwrap();
    assert!(find(&objects, "Role", "ferrolb-speaker-bgp-passwords").is_none());
    for o in &objects {
        for rule in o["rules"].as_array().into_iter().flatten() {
            if rule["resources"].as_array().is_some_and(|r| r.contains(&Value::from("secrets"))) {
                let names = rule["resourceNames"].as_array().map_or(0, Vec::len);
                let verbs = rule["verbs"].as_array().unwrap();
                assert!(
                    names > 0 || verbs == &[Value::from("create")],
                    "{}: Secrets unrestricted: {rule}",
                    key(o)
                );
            }
        }
    }
}

#[test]
fn bad_values_are_refused_naming_the_value() {
    let cases = [
        ("l2.enabled=yes", "l2"),
        ("controller.replicas=0", "replicas"),
        ("image.pullPolicy=Sometimes", "pullPolicy"),
        ("bgp.passwordSecrets={Bad_Name}", "passwordSecrets"),
        ("speeker.logLevel=debug", "speeker"),
        ("speaker.extraArgs={drain}", "extraArgs"),
        ("image.repository=registry.example/ferrolb:1.0", "repository"),
    ];
    for (set, named) in cases {
        let err = template(&[set]).expect_err(set);
        assert!(err.contains("values don't meet the specifications of the schema"), "{set}: {err}");
        assert!(err.contains(named), "{set}: the message does not name {named}: {err}");
    }
}

#[test]
fn chart_yaml_carries_artifact_hub_annotations_for_every_crd() {
    let text = std::fs::read_to_string(helm::chart_dir().join("Chart.yaml")).unwrap();
    let chart: Value = serde_saphyr::from_str(&text).unwrap();
    let annotation = |key: &str| -> Value {
        let a = chart["annotations"][key].as_str().unwrap_or_else(|| panic!("no {key}"));
        serde_saphyr::from_str(a).unwrap_or_else(|e| panic!("{key}: {e}"))
    };
    let crds: Vec<String> = ferrolb_api::crd::crds().into_iter().filter_map(|c| c.metadata.name).collect();
    let listed = annotation("artifacthub.io/crds");
    let mut names: Vec<String> =
        listed.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_owned()).collect();
    assert!(
        listed.as_array().unwrap().iter().all(|c| c["description"].as_str().is_some_and(|d| !d.is_empty()))
    );
    names.sort();
    let mut want = crds.clone();
    want.sort();
    assert_eq!(names, want);
    let examples = annotation("artifacthub.io/crdsExamples");
    let kinds: Vec<&str> = examples.as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.len() >= 6 && kinds.contains(&"IPAddressPool") && kinds.contains(&"BGPPeer"), "{kinds:?}");
    let images = annotation("artifacthub.io/images");
    let image = format!("example.invalid/ferrolb:{}", chart["appVersion"].as_str().unwrap());
    assert_eq!(images[0]["image"], image.as_str());
}

#[test]
fn another_namespace_is_followed_everywhere() {
    let chart = helm::chart_dir().display().to_string();
    let out = helm::run(
        &home(),
        &["template", "ferrolb", &chart, "--namespace", "lb", "--set", "monitoring.enabled=true"],
    )
    .unwrap();
    // Comments keep the kustomize sources' wording; no object names ferrolb-system.
    let code: String =
        out.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n");
    assert!(!code.contains("ferrolb-system"), "{code}");
    let objects = documents(&out);
    let policy = find(&objects, "ValidatingAdmissionPolicy", "ferrolb-speaker-own-node").unwrap();
    assert_eq!(
        policy["spec"]["matchConditions"][0]["expression"],
        "request.userInfo.username == 'system:serviceaccount:lb:ferrolb-speaker'"
    );
    for o in &objects {
        for s in o["subjects"].as_array().into_iter().flatten() {
            if s["kind"] == "ServiceAccount" {
                assert_eq!(s["namespace"], "lb", "{}", key(o));
            }
        }
        if o["kind"] != "ClusterRole"
            && o["kind"] != "ClusterRoleBinding"
            && o["kind"] != "CustomResourceDefinition"
        {
            let ns = o["metadata"]["namespace"].as_str();
            assert!(ns.is_none() || ns == Some("lb") || ns == Some("kube-system"), "{}", key(o));
        }
    }
    let monitor = find(&objects, "ServiceMonitor", "ferrolb").unwrap();
    assert_eq!(monitor["spec"]["namespaceSelector"]["matchNames"], serde_json::json!(["lb"]));
}
