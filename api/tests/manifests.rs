//! The install manifests: every overlay renders with `kubectl kustomize`, every object
//! validates strictly against the Kubernetes schemas of the oldest and newest supported
//! versions (the PyPI package `kubernetes-validate`; `testbed/prereqs.sh` installs it),
//! ferrolb objects pass ferrolb's own validator, and the properties the install promises
//! (least-privilege RBAC, security contexts, probes, drain time) hold.

// Test helpers: a panic is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use ferrolb_api::{Config, Origin, parse_stream, validate};
use serde_json::{Value, json};

/// Oldest Kubernetes version ferrolb supports (API.md).
const OLDEST_KUBERNETES: &str = "1.29.0";
const OVERLAYS: &[&str] = &["l2", "bgp", "l2-bgp"];
const NAMESPACE: &str = "ferrolb-system";
/// Kinds the install ships that the oldest supported Kubernetes lacks, with the first
/// version that has them: validated against that version instead of the oldest.
/// ValidatingAdmissionPolicy (the speaker's own-node policy) is GA in 1.30, as is the
/// node name in bound tokens it relies on; on 1.29 `kubectl apply` refuses just these
/// objects (manifests/README.md).
const NEWER_THAN_OLDEST: &[(&str, &str, &str)] = &[
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "1.30.0"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", "1.30.0"),
];
/// Default of the speaker's `--drain-max-delay`, in seconds (API.md).
const DEFAULT_DRAIN_MAX_DELAY_SECS: u64 = 30;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn manifests() -> PathBuf {
    repo().join("manifests")
}

fn run(cmd: &mut Command, what: &str) -> std::process::Output {
    cmd.output().unwrap_or_else(|e| {
        panic!("cannot run {what}: {e}; run `bash testbed/prereqs.sh` (it installs the test tools)")
    })
}

/// `kubectl kustomize DIR`, failing with kubectl's message.
fn render(dir: &Path) -> String {
    let out = run(Command::new("kubectl").arg("kustomize").arg(dir), "kubectl");
    if !out.status.success() {
        // Old kubectl builds (Debian's 1.20) embed kustomize v2, which lacks components.
        let version = run(Command::new("kubectl").args(["version", "--client"]), "kubectl");
        panic!(
            "`kubectl kustomize {}` failed (the overlays need kubectl 1.27+ with kustomize v5; this is {}):\n{}",
            dir.display(),
            String::from_utf8_lossy(&version.stdout).replace('\n', " "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).unwrap()
}

/// The documents of a YAML stream as JSON values (empty documents dropped).
fn documents(text: &str) -> Vec<Value> {
    ferrolb_api::json_documents(text).unwrap_or_else(|e| panic!("invalid YAML: {e}\n{text}"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn is_ferrolb(obj: &Value) -> bool {
    obj["apiVersion"].as_str().is_some_and(|v| v.starts_with("ferrolb.io/"))
}

fn id(obj: &Value) -> String {
    format!("{}/{}", obj["kind"].as_str().unwrap_or("?"), obj["metadata"]["name"].as_str().unwrap_or("?"))
}

/// The first Kubernetes version that knows `obj`'s kind, when newer than the oldest
/// supported one ([`NEWER_THAN_OLDEST`]).
fn newer_than_oldest(obj: &Value) -> Option<&'static str> {
    NEWER_THAN_OLDEST
        .iter()
        .find(|(v, k, _)| obj["apiVersion"] == *v && obj["kind"] == *k)
        .map(|(.., since)| *since)
}

/// Validates Kubernetes objects with `kubernetes-validate --strict`, once against the
/// oldest supported version (kinds it lacks against the first version that has them,
/// [`NEWER_THAN_OLDEST`]) and once against the newest the package knows (its default).
/// `sets` are (label, objects); each becomes one file per version named after its label.
/// Returns the newest version, or the tool's complaints.
fn kubernetes_validate(sets: &[(String, Vec<Value>)]) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    // Version (None: the newest) → files to validate against it, and how many objects.
    let mut passes: BTreeMap<Option<&str>, (Vec<PathBuf>, usize)> = BTreeMap::new();
    for (label, objects) in sets {
        assert!(objects.iter().all(|o| !is_ferrolb(o)), "ferrolb objects go to ferrolb's validator");
        let mut by_version: BTreeMap<Option<&str>, Vec<&Value>> = BTreeMap::new();
        for o in objects {
            by_version.entry(Some(newer_than_oldest(o).unwrap_or(OLDEST_KUBERNETES))).or_default().push(o);
            by_version.entry(None).or_default().push(o);
        }
        for (version, objects) in by_version {
            let path = dir.path().join(format!("{label}-{}.yaml", version.unwrap_or("newest")));
            let text: String = objects.iter().map(|o| format!("---\n{o}\n")).collect();
            std::fs::write(&path, text).unwrap();
            let pass = passes.entry(version).or_default();
            pass.0.push(path);
            pass.1 += objects.len();
        }
    }
    let mut newest = String::new();
    for (version, (files, expected)) in &passes {
        let mut cmd = Command::new("kubernetes-validate");
        cmd.arg("--strict");
        if let Some(v) = version {
            cmd.args(["-k", v]);
        }
        let out = run(cmd.args(files), "kubernetes-validate (pip install kubernetes-validate)");
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let passed: Vec<&str> = text.lines().filter(|l| l.contains(" passed for resource ")).collect();
        // Anything else (errors, "Couldn't find schema") means an object was not validated.
        let complaints: Vec<&str> =
            text.lines().filter(|l| !l.contains(" passed for resource ") && !l.trim().is_empty()).collect();
        if !out.status.success() || !complaints.is_empty() || passed.len() != *expected {
            let dir = dir.path().display().to_string();
            return Err(format!(
                "kubernetes-validate {} ({} of {expected} objects passed):\n{}",
                version.unwrap_or("(newest)"),
                passed.len(),
                complaints.join("\n").replace(&dir, "")
            ));
        }
        if version.is_none() {
            newest = passed
                .iter()
                .filter_map(|l| l.rsplit("against version ").next())
                .next()
                .unwrap_or_default()
                .to_owned();
        }
    }
    Ok(newest)
}

/// Runs ferrolb's validator on ferrolb objects, as the controller would see them.
fn ferrolb_validate(label: &str, objects: &[Value], origin: Origin) -> Result<Config, String> {
    let text: String = objects.iter().map(|o| format!("---\n{o}\n")).collect();
    let stream = parse_stream(label, &text).map_err(|e| e.to_string())?;
    let config = stream.config();
    let errors = validate(&config, origin);
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(errors.iter().map(|e| format!("{label}: {e}\n")).collect())
    }
}

struct Rendered {
    overlay: &'static str,
    objects: Vec<Value>,
}

/// Every overlay, rendered once per test binary.
fn rendered() -> &'static [Rendered] {
    static RENDERED: OnceLock<Vec<Rendered>> = OnceLock::new();
    RENDERED.get_or_init(|| {
        OVERLAYS
            .iter()
            .map(|o| Rendered {
                overlay: o,
                objects: documents(&render(&manifests().join("overlays").join(o))),
            })
            .collect()
    })
}

fn bootstrap_pod() -> Value {
    let docs = documents(&read(&manifests().join("bootstrap/ferrolb-bootstrap.yaml")));
    assert_eq!(docs.len(), 1, "the static pod file holds exactly one Pod");
    docs.into_iter().next().unwrap()
}

fn examples() -> Vec<(String, Vec<Value>)> {
    let mut out = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(manifests().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    for p in paths {
        let name = format!("examples-{}", p.file_stem().unwrap().to_string_lossy());
        out.push((name, documents(&read(&p))));
    }
    out
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
}

/// Every object of every overlay, the static pod and the examples, validated strictly
/// for the oldest and newest Kubernetes; ferrolb objects by ferrolb's validator.
#[test]
fn everything_validates_against_kubernetes_and_ferrolb() {
    let mut sets: Vec<(String, Vec<Value>)> = Vec::new();
    let mut problems = String::new();
    for r in rendered() {
        let (ours, theirs): (Vec<Value>, Vec<Value>) = r.objects.iter().cloned().partition(is_ferrolb);
        if let Err(e) = ferrolb_validate(r.overlay, &ours, Origin::Cluster) {
            problems.push_str(&e);
        }
        sets.push((format!("overlay-{}", r.overlay), theirs));
    }
    sets.push(("bootstrap".into(), vec![bootstrap_pod()]));
    for (label, objects) in examples() {
        let (ours, theirs): (Vec<Value>, Vec<Value>) = objects.into_iter().partition(is_ferrolb);
        if let Err(e) = ferrolb_validate(&label, &ours, Origin::Cluster) {
            problems.push_str(&e);
        }
        if !theirs.is_empty() {
            sets.push((label, theirs));
        }
    }
    match kubernetes_validate(&sets) {
        Ok(newest) => {
            let minor = |v: &str| v.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()).unwrap_or(0);
            assert!(minor(&newest) >= 33, "kubernetes-validate's newest version {newest:?} is too old");
            eprintln!("validated against Kubernetes {OLDEST_KUBERNETES} and {newest}");
        }
        Err(e) => problems.push_str(&e),
    }
    assert!(problems.is_empty(), "{problems}");
}

/// The harness is not a no-op: a typo in a manifest and an invalid ferrolb object fail.
#[test]
fn validation_rejects_broken_manifests() {
    let mut pod = bootstrap_pod();
    pod["spec"]["hostNetwrok"] = Value::Bool(true);
    let err = kubernetes_validate(&[("broken".into(), vec![pod])]).unwrap_err();
    assert!(err.contains("hostNetwrok"), "{err}");

    let mut objects = examples().into_iter().find(|(l, _)| l == "examples-l2").unwrap().1;
    objects[0]["spec"]["addresses"][0] = Value::String("192.0.2.250-192.0.2.200".into());
    let err = ferrolb_validate("examples-l2", &objects, Origin::Cluster).unwrap_err();
    assert!(err.contains("IPAddressPool/lan: spec.addresses[0]"), "{err}");
}

#[test]
fn examples_cover_every_kind_and_form_one_valid_configuration() {
    let all: Vec<Value> = examples().into_iter().flat_map(|(_, o)| o).filter(is_ferrolb).collect();
    let config = ferrolb_validate("examples", &all, Origin::Cluster).unwrap();
    assert!(!config.pools.is_empty() && !config.l2_advertisements.is_empty());
    assert!(!config.peers.is_empty() && !config.bgp_advertisements.is_empty());
    assert!(!config.bfd_profiles.is_empty() && !config.control_plane_vips.is_empty());
    // The VIP example is also what `ferrolb-bootstrap checkpoint init` writes: a file.
    let vip: Vec<Value> = all.iter().filter(|o| o["kind"] == "ControlPlaneVIP").cloned().collect();
    ferrolb_validate("controlplane-vip checkpoint", &vip, Origin::File).unwrap();
    // The BGP example's Secret is the one components/bgp lets the speaker read.
    let bgp = examples().into_iter().find(|(l, _)| l == "examples-bgp").unwrap().1;
    let peer = find(&bgp, "BGPPeer", "router-a");
    let secret = &peer["spec"]["passwordSecret"];
    find(&bgp, "Secret", secret["name"].as_str().unwrap());
    let role = documents(&read(&manifests().join("components/bgp/bgp-password-rbac.yaml")));
    let role = find(&role, "Role", "ferrolb-speaker-bgp-passwords");
    assert_eq!(role["metadata"]["namespace"], secret["namespace"]);
    assert!(
        strings(&role["rules"][0]["resourceNames"]).contains(&secret["name"].as_str().unwrap().to_owned())
    );
}

/// (scope, apiGroup, resource, verb, resourceName): `scope` is `cluster` or a namespace.
type Permission = (String, String, String, String, String);

/// Who may do what, from the RBAC objects: subject (`sa:NS/NAME` or `user:NAME`) → permissions.
fn permissions(objects: &[Value]) -> BTreeMap<String, BTreeSet<Permission>> {
    let mut out: BTreeMap<String, BTreeSet<Permission>> = BTreeMap::new();
    for b in objects.iter().filter(|o| o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding") {
        let ns = b["metadata"]["namespace"].as_str();
        let role_kind = b["roleRef"]["kind"].as_str().unwrap();
        let role = objects
            .iter()
            .find(|o| {
                o["kind"] == role_kind
                    && o["metadata"]["name"] == b["roleRef"]["name"]
                    && (role_kind == "ClusterRole" || o["metadata"]["namespace"].as_str() == ns)
            })
            .unwrap_or_else(|| panic!("{} refers to a missing {role_kind}", id(b)));
        let scope = ns.unwrap_or("cluster").to_owned();
        for subject in b["subjects"].as_array().unwrap() {
            let who = match subject["kind"].as_str().unwrap() {
                "ServiceAccount" => format!(
                    "sa:{}/{}",
                    subject["namespace"].as_str().unwrap(),
                    subject["name"].as_str().unwrap()
                ),
                other => format!("{}:{}", other.to_lowercase(), subject["name"].as_str().unwrap()),
            };
            let set = out.entry(who).or_default();
            for rule in role["rules"].as_array().unwrap() {
                let names = strings(&rule["resourceNames"]);
                let names = if names.is_empty() { vec!["*".to_owned()] } else { names };
                for g in strings(&rule["apiGroups"]) {
                    for r in strings(&rule["resources"]) {
                        for v in strings(&rule["verbs"]) {
                            for n in &names {
                                set.insert((scope.clone(), g.clone(), r.clone(), v.clone(), n.clone()));
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Expands `(scope, groups, resources, verbs, names)` with comma-separated lists.
fn expand(rows: &[(&str, &str, &str, &str, &str)]) -> BTreeSet<Permission> {
    let split = |s: &str| s.split(',').map(|x| x.trim().to_owned()).collect::<Vec<_>>();
    let mut out = BTreeSet::new();
    for (scope, groups, resources, verbs, names) in rows {
        for g in split(groups) {
            for r in split(resources) {
                for v in split(verbs) {
                    for n in split(names) {
                        out.insert((scope.to_string(), g.clone(), r.clone(), v.clone(), n));
                    }
                }
            }
        }
    }
    out
}

/// Least privilege, exactly: any added permission must be added here on purpose.
#[test]
fn rbac_is_exactly_the_least_privilege_of_each_component() {
    let config = "ipaddresspools,bgppeers,bgpadvertisements,l2advertisements,bfdprofiles";
    let controller = expand(&[
        ("cluster", "", "services", "list,watch,patch", "*"),
        ("cluster", "", "services/status", "patch", "*"),
        ("cluster", "", "namespaces", "list,watch", "*"),
        // list: its MetalLBAnnotation Events, read back on start.
        ("cluster", "events.k8s.io", "events", "create,patch,list", "*"),
        // Every configuration kind: validated together, each one's Valid condition written.
        ("cluster", "ferrolb.io", &format!("{config},controlplanevips"), "list,watch", "*"),
        (
            "cluster",
            "ferrolb.io",
            "ipaddresspools/status,bgppeers/status,bgpadvertisements/status,l2advertisements/status,\
             bfdprofiles/status,controlplanevips/status",
            "patch",
            "*",
        ),
        (NAMESPACE, "coordination.k8s.io", "leases", "create", "*"),
        (NAMESPACE, "coordination.k8s.io", "leases", "get,update", "ferrolb-controller"),
        (NAMESPACE, "", "secrets", "create", "*"),
        (NAMESPACE, "", "secrets", "get", "ferrolb-membership"),
        // The Nodes' facts for L2 speakers: Nodes watched, one ConfigMap per Node written.
        ("cluster", "", "nodes", "list,watch", "*"),
        (NAMESPACE, "", "configmaps", "list,watch,create,patch,delete", "*"),
    ]);
    let speaker_common = [
        ("cluster", "", "nodes,services", "list,watch", "*"),
        ("cluster", "discovery.k8s.io", "endpointslices", "list,watch", "*"),
        ("cluster", "ferrolb.io", config, "list,watch", "*"),
        ("cluster", "ferrolb.io", "serviceannouncements", "list,watch,create,patch,delete", "*"),
        ("cluster", "events.k8s.io", "events", "create,patch", "*"),
        ("cluster", "", "pods", "list,watch", "*"),
        ("cluster", "", "pods/status", "patch", "*"),
    ];
    // Read, then watched by name for rotation (list/watch with fieldSelector metadata.name).
    let membership = (NAMESPACE, "", "secrets", "get,list,watch", "ferrolb-membership");
    // L2 speakers read the Nodes' facts the controller publishes.
    let node_facts = (NAMESPACE, "", "configmaps", "list,watch", "*");
    let passwords = (NAMESPACE, "", "secrets", "get,list,watch", "bgp-auth");
    let bootstrap =
        expand(&[("cluster", "ferrolb.io", "controlplanevips,bgppeers,bfdprofiles", "get,list,watch", "*")]);
    for r in rendered() {
        let mut speaker_rows = speaker_common.to_vec();
        if r.overlay.contains("l2") {
            speaker_rows.push(membership);
            speaker_rows.push(node_facts);
        }
        if r.overlay.contains("bgp") {
            speaker_rows.push(passwords);
        }
        let want: BTreeMap<String, BTreeSet<Permission>> = [
            (format!("sa:{NAMESPACE}/ferrolb-controller"), controller.clone()),
            (format!("sa:{NAMESPACE}/ferrolb-speaker"), expand(&speaker_rows)),
            ("group:ferrolb.io:bootstrap".to_owned(), bootstrap.clone()),
        ]
        .into();
        let have = permissions(&r.objects);
        for (who, perms) in &want {
            let got = have.get(who).cloned().unwrap_or_default();
            let extra: Vec<_> = got.difference(perms).collect();
            let missing: Vec<_> = perms.difference(&got).collect();
            assert!(
                extra.is_empty() && missing.is_empty(),
                "overlay {}: {who}: extra {extra:#?}\nmissing {missing:#?}",
                r.overlay
            );
        }
        assert_eq!(have.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "overlay {}", r.overlay);
        // Every ServiceAccount a workload runs as exists in the overlay.
        for o in r.objects.iter().filter(|o| o["kind"] == "Deployment" || o["kind"] == "DaemonSet") {
            let sa = o["spec"]["template"]["spec"]["serviceAccountName"].as_str().unwrap();
            find(&r.objects, "ServiceAccount", sa);
        }
    }
}

/// Writes the speaker's RBAC grants that the own-node policy need not tie to a node:
/// (apiGroup, resource, why).
const SPEAKER_WRITES_ANY_NODE: &[(&str, &str, &str)] = &[(
    "events.k8s.io",
    "events",
    "an Event is about a Service, not a node; the speaker's node is its reportingInstance",
)];

/// Every write the speaker's roles grant, except [`SPEAKER_WRITES_ANY_NODE`], is one the
/// admission policy `ferrolb-speaker-own-node` ties to the speaker's node (RBAC cannot),
/// for the ServiceAccount the DaemonSet runs as, failing closed.
#[test]
fn speaker_writes_are_tied_to_its_own_node() {
    let operation = |verb: &str| match verb {
        "create" => "CREATE",
        "update" | "patch" => "UPDATE",
        "delete" | "deletecollection" => "DELETE",
        other => panic!("unexpected write verb {other}"),
    };
    for r in rendered() {
        let what = format!("overlay {}", r.overlay);
        let policy = find(&r.objects, "ValidatingAdmissionPolicy", "ferrolb-speaker-own-node");
        assert_eq!(policy["apiVersion"], "admissionregistration.k8s.io/v1", "{what}");
        assert_eq!(policy["spec"]["failurePolicy"], "Fail", "{what}");
        let ds = find(&r.objects, "DaemonSet", "ferrolb-speaker");
        let user = format!(
            "system:serviceaccount:{}:{}",
            ds["metadata"]["namespace"].as_str().unwrap(),
            ds["spec"]["template"]["spec"]["serviceAccountName"].as_str().unwrap()
        );
        let conditions = policy["spec"]["matchConditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 1, "{what}: the policy matches the speaker alone");
        assert_eq!(
            conditions[0]["expression"],
            format!("request.userInfo.username == '{user}'"),
            "{what}: the policy must match the user the DaemonSet's pods run as"
        );
        let binding = find(&r.objects, "ValidatingAdmissionPolicyBinding", "ferrolb-speaker-own-node");
        assert_eq!(binding["spec"]["policyName"], "ferrolb-speaker-own-node", "{what}");
        assert_eq!(strings(&binding["spec"]["validationActions"]), ["Deny"], "{what}");
        assert!(binding["spec"]["paramRef"].is_null() && binding["spec"]["matchResources"].is_null());

        let rules = policy["spec"]["matchConstraints"]["resourceRules"].as_array().unwrap();
        let covered = |group: &str, resource: &str, op: &str| {
            rules.iter().any(|rule| {
                strings(&rule["apiGroups"]).iter().any(|g| g == group)
                    && strings(&rule["resources"]).iter().any(|r| r == resource)
                    && strings(&rule["operations"]).iter().any(|o| o == op)
            })
        };
        let sa = format!("sa:{NAMESPACE}/ferrolb-speaker");
        let grants = permissions(&r.objects).remove(&sa).unwrap();
        let mut writes = 0;
        for (_, group, resource, verb, _) in &grants {
            if ["get", "list", "watch"].contains(&verb.as_str())
                || SPEAKER_WRITES_ANY_NODE.iter().any(|(g, res, _)| g == group && res == resource)
            {
                continue;
            }
            writes += 1;
            assert!(
                covered(group, resource, operation(verb)),
                "{what}: the speaker may {verb} {group}/{resource}, which the own-node policy does not check"
            );
        }
        assert!(writes >= 4, "{what}: create/patch/delete serviceannouncements, patch pods/status");
    }
}

/// The viewer role every overlay ships (for people and `kubectl ferrolb`): exactly read
/// access to every ferrolb kind and what the plugin explains them with, never a write,
/// never Secrets, and bound to no one.
#[test]
fn viewer_role_is_read_only_and_unbound() {
    let kinds = "ipaddresspools,bgppeers,bgpadvertisements,l2advertisements,bfdprofiles,controlplanevips,\
                 serviceannouncements";
    let want = expand(&[
        ("cluster", "ferrolb.io", kinds, "get,list,watch", "*"),
        ("cluster", "", "services,nodes,pods,events", "get,list,watch", "*"),
        ("cluster", "events.k8s.io", "events", "get,list,watch", "*"),
    ]);
    for r in rendered() {
        let role = find(&r.objects, "ClusterRole", "ferrolb-viewer");
        let binding = json!({
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "probe"},
            "roleRef": {"kind": "ClusterRole", "name": "ferrolb-viewer"},
            "subjects": [{"kind": "User", "name": "viewer"}],
        });
        let have = permissions(&[role.clone(), binding]).remove("user:viewer").unwrap_or_default();
        assert_eq!(have, want, "overlay {}", r.overlay);
        let bound = r.objects.iter().any(|o| {
            (o["kind"] == "ClusterRoleBinding" || o["kind"] == "RoleBinding")
                && o["roleRef"]["name"] == "ferrolb-viewer"
        });
        assert!(!bound, "overlay {}: ferrolb-viewer must not be bound by the manifests", r.overlay);
    }
}

fn container(pod_spec: &Value) -> &Value {
    let containers = pod_spec["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    &containers[0]
}

/// The capabilities a container adds; they take effect only for root, and the image's
/// default user is not root, so such a container must ask for uid 0.
fn capabilities_added(c: &Value) -> BTreeSet<String> {
    let added: BTreeSet<String> = strings(&c["securityContext"]["capabilities"]["add"]).into_iter().collect();
    if !added.is_empty() {
        assert_eq!(c["securityContext"]["runAsUser"], 0, "{}: capabilities {added:?} need uid 0", c["name"]);
    }
    added
}

/// Liveness and readiness probes that hit a port the container declares or binds.
fn assert_probes(what: &str, c: &Value) {
    let args = strings(&c["args"]);
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &c[probe]["httpGet"];
        assert!(get.is_object(), "{what}: {probe}");
        let port = match &get["port"] {
            Value::String(name) => c["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == name.as_str())
                .unwrap_or_else(|| panic!("{what}: {probe} names port {name}, not declared"))["containerPort"]
                .as_u64()
                .unwrap(),
            p => p.as_u64().unwrap(),
        };
        let served = args.iter().any(|a| {
            (a.starts_with("--metrics-addr=") || a.starts_with("--health-addr="))
                && a.ends_with(&format!(":{port}"))
        });
        assert!(
            served,
            "{what}: {probe} probes port {port}, which no --metrics-addr/--health-addr binds: {args:?}"
        );
        if let Some(host) = get["host"].as_str() {
            assert!(
                args.iter().any(|a| a.contains(&format!("={host}:{port}"))),
                "{what}: {probe} host {host}"
            );
        }
    }
}

fn assert_node_name_from_downward_api(what: &str, c: &Value) {
    assert!(strings(&c["args"]).contains(&"--node-name=$(NODE_NAME)".to_owned()), "{what}");
    let env = c["env"].as_array().unwrap().iter().find(|e| e["name"] == "NODE_NAME").unwrap();
    assert_eq!(env["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName", "{what}");
}

fn assert_locked_down(what: &str, c: &Value) {
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_ne!(sc["privileged"], true, "{what}");
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"], "{what}");
    for r in ["requests", "limits"] {
        assert!(c["resources"][r]["memory"].is_string(), "{what}: resources.{r}.memory");
    }
}

#[test]
fn workloads_keep_their_promises() {
    for r in rendered() {
        let what = format!("overlay {}", r.overlay);
        let ns = find(&r.objects, "Namespace", NAMESPACE);
        assert_eq!(ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"], "privileged");

        let deploy = find(&r.objects, "Deployment", "ferrolb-controller");
        assert_eq!(deploy["metadata"]["namespace"], NAMESPACE);
        assert_eq!(deploy["spec"]["replicas"], 2, "{what}");
        let pod = &deploy["spec"]["template"]["spec"];
        let c = container(pod);
        assert!(strings(&c["args"]).contains(&"--leader-elect".to_owned()), "{what}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{what}");
        assert_eq!(pod["securityContext"]["runAsUser"], 65532, "{what}: the image's nonroot user");
        assert!(capabilities_added(c).is_empty(), "{what}: the controller needs no capability");
        assert_ne!(pod["hostNetwork"], true, "{what}");
        assert_locked_down("controller", c);
        assert_probes("controller", c);

        let ds = find(&r.objects, "DaemonSet", "ferrolb-speaker");
        assert_eq!(ds["metadata"]["namespace"], NAMESPACE);
        let pod = &ds["spec"]["template"]["spec"];
        let c = container(pod);
        assert_eq!(pod["hostNetwork"], true, "{what}");
        assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet", "{what}");
        // SYS_NICE: the L2 heartbeat thread's real-time priority (speaker/README-l2.md).
        let want: BTreeSet<String> = ["NET_ADMIN", "NET_RAW", "SYS_NICE"].map(String::from).into();
        assert_eq!(capabilities_added(c), want, "{what}");
        assert_locked_down("speaker", c);
        assert_probes("speaker", c);
        assert_node_name_from_downward_api("speaker", c);
        assert!(
            pod["tolerations"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["key"] == "node-role.kubernetes.io/control-plane"
                    && t["operator"] == "Exists"
                    && t["effect"] == "NoSchedule"),
            "{what}: speakers must run on control-plane nodes too"
        );
        let drain = strings(&c["args"])
            .iter()
            .find_map(|a| {
                a.strip_prefix("--drain-max-delay=").map(|d| d.parse::<ferrolb_api::Duration>().unwrap())
            })
            .map_or(DEFAULT_DRAIN_MAX_DELAY_SECS, |d| d.std().as_secs());
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
        assert!(grace > drain + 5, "{what}: grace period {grace}s must outlast the {drain}s drain");
        // Membership is SWIM over UDP: nothing listens on TCP 7946, so no TCP port is declared.
        let l2_ports: Vec<&str> = c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["containerPort"] == 7946)
            .map(|p| p["protocol"].as_str().unwrap_or("TCP"))
            .collect();
        let want: &[&str] = if r.overlay.contains("l2") { &["UDP"] } else { &[] };
        assert_eq!(l2_ports, want, "{what}: membership ports");
    }
}

#[test]
fn bootstrap_static_pod_keeps_its_promises() {
    let pod = bootstrap_pod();
    assert_eq!(pod["kind"], "Pod");
    assert_eq!(pod["metadata"]["namespace"], "kube-system");
    let spec = &pod["spec"];
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["priorityClassName"], "system-node-critical");
    assert!(spec["serviceAccountName"].is_null(), "a static pod cannot use a ServiceAccount");
    let c = container(spec);
    let want: BTreeSet<String> = ["NET_ADMIN", "NET_RAW"].map(String::from).into();
    assert_eq!(capabilities_added(c), want);
    assert_locked_down("bootstrap", c);
    assert_probes("bootstrap", c);
    assert_node_name_from_downward_api("bootstrap", c);
    let args = strings(&c["args"]);
    assert_eq!(args[0], "run");
    let checkpoint = args.iter().find_map(|a| a.strip_prefix("--checkpoint=")).unwrap();
    let mount =
        c["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == "/etc/ferrolb").unwrap();
    assert_ne!(mount["readOnly"], true, "bootstrap rewrites its checkpoint");
    assert!(checkpoint.starts_with("/etc/ferrolb/"), "{checkpoint}");
    let volume = spec["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
    assert_eq!(volume["hostPath"]["path"], "/etc/ferrolb");
}

/// Workspace binaries that ship (the testbed is a development tool).
fn shipped_binaries() -> BTreeSet<String> {
    let out = run(
        Command::new(env!("CARGO"))
            .args(["metadata", "--no-deps", "--offline", "--format-version", "1", "--manifest-path"])
            .arg(repo().join("Cargo.toml")),
        "cargo metadata",
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut bins = BTreeSet::new();
    for p in meta["packages"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            if strings(&t["kind"]).contains(&"bin".to_owned()) {
                bins.insert(t["name"].as_str().unwrap().to_owned());
            }
        }
    }
    bins.remove("ferrolb-testbed");
    // The kubectl plugin runs on the user's machine, not in the cluster.
    bins.remove("kubectl-ferrolb");
    bins
}

/// The image builds on the Dockerfile's Rust: no dependency (for this host's platform)
/// declares a newer `rust-version`. `cargo metadata` reads every package of the
/// workspace, so this fetches what `cargo test -p ferrolb-api` alone has not downloaded.
#[test]
fn no_dependency_needs_a_newer_rust_than_the_image() {
    let rust_version = read(&repo().join("Cargo.toml"))
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = ").map(|v| v.trim_matches('"').to_owned()))
        .unwrap();
    let rustc = String::from_utf8_lossy(&run(Command::new("rustc").arg("-vV"), "rustc").stdout).into_owned();
    let host = rustc.lines().find_map(|l| l.strip_prefix("host: ")).expect("rustc -vV names the host");
    let out = run(
        Command::new(env!("CARGO"))
            .args(["metadata", "--locked", "--format-version", "1", "--filter-platform", host])
            .arg("--manifest-path")
            .arg(repo().join("Cargo.toml")),
        "cargo metadata",
    );
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let version = |v: &str| {
        v.split('.').map(|n| n.parse::<u32>().unwrap_or(0)).chain([0, 0]).take(3).collect::<Vec<_>>()
    };
    let too_new: Vec<String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["rust_version"].as_str().is_some_and(|v| version(v) > version(&rust_version)))
        .map(|p| format!("{} {} needs Rust {}", p["name"], p["version"], p["rust_version"]))
        .collect();
    assert!(too_new.is_empty(), "the Dockerfile's rust:{rust_version} cannot build: {too_new:?}");
}

/// The image holds exactly the shipped binaries, built with the workspace's Rust, and
/// the manifests run only those, from the image of this version.
#[test]
fn image_and_manifests_agree_with_the_workspace() {
    let dockerfile = read(&repo().join("Dockerfile"));
    let arg = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG BINARIES="))
        .expect("Dockerfile: ARG BINARIES=\"...\"");
    let in_image: BTreeSet<String> = arg.trim_matches('"').split_whitespace().map(String::from).collect();
    assert_eq!(in_image, shipped_binaries(), "Dockerfile BINARIES vs the workspace's binaries");
    assert!(dockerfile.contains("COPY --from=build /out/ /usr/local/bin/"));
    let rust_version = read(&repo().join("Cargo.toml"))
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = ").map(|v| v.trim_matches('"').to_owned()))
        .unwrap();
    assert!(
        dockerfile.contains(&format!("rust:{rust_version}-")),
        "the builder image should use the workspace rust-version {rust_version}"
    );
    // The image builds with `cargo build --locked`: the lock file must be current. Any
    // command that resolves the workspace checks that for every crate; `cargo tree -p
    // ferrolb-api` lists only this crate's packages, so it needs nothing that `cargo test
    // -p ferrolb-api` has not downloaded (`cargo metadata` wants every package of the
    // workspace, the other crates' dev-dependencies too, which --offline cannot fetch).
    let out = run(
        Command::new(env!("CARGO"))
            .args(["tree", "--locked", "--offline", "-p", "ferrolb-api", "--depth", "0", "-e", "normal"])
            .arg("--manifest-path")
            .arg(repo().join("Cargo.toml")),
        "cargo tree",
    );
    assert!(out.status.success(), "Cargo.lock is not current: {}", String::from_utf8_lossy(&out.stderr));

    let image = format!("example.invalid/ferrolb:{}", env!("CARGO_PKG_VERSION"));
    let mut pods: Vec<(String, Value)> = vec![("bootstrap".into(), bootstrap_pod()["spec"].clone())];
    for r in rendered() {
        for o in r.objects.iter().filter(|o| o["kind"] == "Deployment" || o["kind"] == "DaemonSet") {
            pods.push((format!("{} {}", r.overlay, id(o)), o["spec"]["template"]["spec"].clone()));
        }
    }
    for (what, spec) in pods {
        for c in spec["containers"].as_array().unwrap() {
            assert_eq!(c["image"], image.as_str(), "{what}");
            let command = strings(&c["command"]);
            let bin = command[0].strip_prefix("/usr/local/bin/").unwrap_or_else(|| panic!("{what}"));
            assert!(in_image.contains(bin), "{what} runs {bin}, which the image does not hold");
        }
    }
}

/// The README's install, example and recipe commands name files that exist.
#[test]
fn readme_names_only_existing_manifests() {
    let readme = read(&repo().join("README.md"));
    let mut named = 0;
    for word in readme.split(|c: char| c.is_whitespace() || "`()[],;'\"|".contains(c)) {
        if let Some(rest) = word.strip_prefix("manifests/") {
            let rest = rest.trim_end_matches(['.', ':', '/']);
            assert!(
                manifests().join(rest).exists(),
                "README.md names manifests/{rest}, which does not exist"
            );
            named += 1;
        }
    }
    assert!(named >= 10, "README.md should document the manifests ({named} paths found)");
}
