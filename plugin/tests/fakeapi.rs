//! The plugin binary against the in-process fake apiserver over HTTP, with a kubeconfig
//! as a user has one: every command, as table, JSON and YAML.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use ferrolb_api::{BgpPeer, IpAddressPool, ServiceAnnouncement};
use ferrolb_fakeapi::{FakeApiServer, http};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::CustomResourceExt as _;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

async fn create<K>(api: Api<K>, obj: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap()
}

async fn status<K>(api: Api<K>, name: &str, status: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({ "status": status })))
        .await
        .unwrap();
}

fn service(ns: &str, name: &str, annotations: Value, selector: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": ns, "annotations": annotations},
           "spec": {"type": "LoadBalancer", "selector": selector, "ports": [{"port": 80}]}})
}

fn announcement(
    ns: &str,
    svc: &str,
    node: &str,
    proto: &str,
    addrs: &[&str],
    peers: &[&str],
    ifs: &[&str],
) -> Value {
    json!({"metadata": {"name": format!("{svc}-{node}-{}", proto.to_lowercase()), "namespace": ns},
           "spec": {"node": node, "service": {"namespace": ns, "name": svc}, "protocol": proto,
                    "addresses": addrs, "peers": peers, "interfaces": ifs}})
}

/// An Event as the speakers and the controller write them (events.k8s.io/v1).
fn event(ns: &str, name: &str, svc: &str, component: &str, node: &str, reason: &str, note: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": ns},
           "eventTime": k8s_openapi::jiff::Timestamp::now().to_string(),
           "reportingController": component, "reportingInstance": node, "action": reason,
           "reason": reason, "note": note, "type": "Normal",
           "regarding": {"apiVersion": "v1", "kind": "Service", "namespace": ns, "name": svc}})
}

fn valid(status: &str, message: &str) -> Value {
    json!([{"type": "Valid", "status": status, "reason": if status == "True" {"Valid"} else {"Invalid"},
            "message": message, "lastTransitionTime": "2025-01-01T00:00:00Z"}])
}

/// A cluster with: shop/web announced by BGP from n1 and n2, shop/down withdrawn by
/// n2, shop/pending without an address (its pool is invalid), other/lan by L2 from n1.
async fn cluster(fake: &FakeApiServer) {
    for crd in [ServiceAnnouncement::crd(), IpAddressPool::crd(), BgpPeer::crd()] {
        fake.register_crd(&crd).unwrap();
    }
    let c = fake.new_client();
    for ns in ["shop", "other"] {
        create::<Namespace>(Api::all(c.clone()), json!({"metadata": {"name": ns}})).await;
    }
    for (n, labels) in [("n1", json!({"role": "edge"})), ("n2", json!({"role": "edge"})), ("n3", json!({}))] {
        create::<Node>(Api::all(c.clone()), json!({"metadata": {"name": n, "labels": labels}})).await;
    }
    let pools: Api<IpAddressPool> = Api::all(c.clone());
    create(
        pools.clone(),
        json!({"apiVersion": "ferrolb.io/v1alpha1", "kind": "IPAddressPool",
        "metadata": {"name": "public"}, "spec": {"addresses": ["203.0.113.0/24", "2001:db8:3::/120"]}}),
    )
    .await;
    status(
        pools.clone(),
        "public",
        json!({"conditions": valid("True", ""), "assignedIPv4": 2, "availableIPv4": 254,
        "assignedIPv6": 0, "availableIPv6": 256}),
    )
    .await;
    create(
        pools.clone(),
        json!({"apiVersion": "ferrolb.io/v1alpha1", "kind": "IPAddressPool",
        "metadata": {"name": "broken"}, "spec": {"addresses": ["198.51.100.300/32"], "autoAssign": false}}),
    )
    .await;
    status(
        pools,
        "broken",
        json!({"conditions": valid("False",
        "spec.addresses[0]: \"198.51.100.300/32\" is not a CIDR or range")}),
    )
    .await;
    let peers: Api<BgpPeer> = Api::all(c.clone());
    create(
        peers.clone(),
        json!({"apiVersion": "ferrolb.io/v1alpha1", "kind": "BGPPeer", "metadata": {"name": "router-a"},
        "spec": {"myASN": 64513, "peerASN": 64512, "peerAddress": "192.0.2.1", "bfdProfile": "fast",
                 "nodeSelectors": [{"matchLabels": {"role": "edge"}}]}}),
    )
    .await;
    status(peers.clone(), "router-a", json!({"conditions": valid("True", "")})).await;
    create(peers, json!({"apiVersion": "ferrolb.io/v1alpha1", "kind": "BGPPeer", "metadata": {"name": "router-b"},
        "spec": {"myASN": 64513, "peerASN": 64514, "peerAddress": "192.0.2.2", "nodeSelectors": [{"matchLabels": {"role": "edge"}}]}})).await;

    let allocated = |p: &str| json!({"ferrolb.io/ip-allocated-from-pool": p});
    for (ns, name, annotations, ip) in [
        ("shop", "web", allocated("public"), Some("203.0.113.10")),
        ("shop", "down", allocated("public"), Some("203.0.113.11")),
        ("shop", "pending", json!({"ferrolb.io/address-pool": "broken"}), None),
        ("other", "lan", allocated("public"), Some("203.0.113.12")),
    ] {
        let svcs: Api<Service> = Api::namespaced(c.clone(), ns);
        create(svcs.clone(), service(ns, name, annotations, json!({"app": name}))).await;
        if let Some(ip) = ip {
            status(svcs, name, json!({"loadBalancer": {"ingress": [{"ip": ip}]}})).await;
        }
    }
    let shop: Api<ServiceAnnouncement> = Api::namespaced(c.clone(), "shop");
    create(
        shop.clone(),
        announcement("shop", "web", "n1", "BGP", &["203.0.113.10"], &["router-a", "router-b"], &[]),
    )
    .await;
    create(shop, announcement("shop", "web", "n2", "BGP", &["203.0.113.10"], &["router-a"], &[])).await;
    create::<ServiceAnnouncement>(
        Api::namespaced(c.clone(), "other"),
        announcement("other", "lan", "n1", "L2", &["203.0.113.12"], &[], &["eth0"]),
    )
    .await;

    let pods: Api<Pod> = Api::namespaced(c.clone(), "shop");
    for (pod, ready, reason) in [("web-1", "True", "Announced"), ("web-2", "False", "AnnouncementPending")] {
        create(
            pods.clone(),
            json!({"metadata": {"name": pod, "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x"}],
                     "readinessGates": [{"conditionType": "ferrolb.io/load-balancer-ready"}]}}),
        )
        .await;
        status(
            pods.clone(),
            pod,
            json!({"conditions": [{"type": "ferrolb.io/load-balancer-ready", "status": ready,
            "reason": reason, "message": "by BGP to router-a"}]}),
        )
        .await;
    }
    let events: Api<Event> = Api::namespaced(c.clone(), "shop");
    let speaker = "ferrolb-speaker";
    create(
        events.clone(),
        event(
            "shop",
            "e1",
            "down",
            speaker,
            "n2",
            "Announced",
            "node n2 announces 203.0.113.11 by BGP to BGPPeer router-a",
        ),
    )
    .await;
    create(
        events.clone(),
        event(
            "shop",
            "e2",
            "down",
            speaker,
            "n2",
            "Withdrawn",
            "node n2 withdrew 203.0.113.11 (BGP): 203.0.113.11: no serving endpoint",
        ),
    )
    .await;
    create(
        events.clone(),
        event(
            "shop",
            "e3",
            "web",
            speaker,
            "n2",
            "Announced",
            "node n2 announces 203.0.113.10 by BGP to BGPPeer router-a",
        ),
    )
    .await;
    create(
        events,
        event(
            "shop",
            "e4",
            "pending",
            "ferrolb-controller",
            "ctrl-0",
            "AllocationFailed",
            "IPAddressPool broken is not valid",
        ),
    )
    .await;
}

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn run(kubeconfig: &Path, args: &[&str], env_kubeconfig: bool) -> Run {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-ferrolb"));
    if env_kubeconfig {
        cmd.env("KUBECONFIG", kubeconfig);
    } else {
        cmd.arg("--kubeconfig").arg(kubeconfig).env_remove("KUBECONFIG");
    }
    let out = cmd.args(args).output().await.unwrap();
    let r = Run {
        ok: out.status.success(),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    println!("$ kubectl-ferrolb {}\n{}{}", args.join(" "), r.stdout, r.stderr);
    r
}

fn line<'a>(table: &'a str, starts: &str) -> &'a str {
    table.lines().find(|l| l.starts_with(starts)).unwrap_or_else(|| panic!("no line {starts:?} in\n{table}"))
}

fn cells(line: &str) -> Vec<&str> {
    line.split("   ").map(str::trim).filter(|c| !c.is_empty()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_as_table_json_and_yaml() {
    let fake = FakeApiServer::new();
    cluster(&fake).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _server = http::serve(&fake, listener);
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    http::write_kubeconfig(&kc, &addr.to_string()).unwrap();

    // status -A: one row per LoadBalancer Service, every column filled from its source.
    let r = run(&kc, &["status", "-A"], false).await;
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stdout.starts_with("NAMESPACE   NAME "), "{}", r.stdout);
    assert_eq!(
        cells(line(&r.stdout, "shop        web ")),
        [
            "shop",
            "web",
            "203.0.113.10",
            "public",
            "BGP",
            "n1,n2",
            "router-a,router-b",
            "1/2",
            "Announced: node n2 announces 203.0.113.10 by BGP to BGPPeer router-a"
        ]
    );
    assert_eq!(
        cells(line(&r.stdout, "shop        pending ")),
        [
            "shop",
            "pending",
            "<none>",
            "broken (Valid=False)",
            "<none>",
            "<none>",
            "<none>",
            "<none>",
            "AllocationFailed: IPAddressPool broken is not valid"
        ]
    );
    assert!(
        line(&r.stdout, "shop        down ")
            .ends_with("Withdrawn: node n2 withdrew 203.0.113.11 (BGP): 203.0.113.11: no serving endpoint")
    );
    assert_eq!(cells(line(&r.stdout, "other       lan "))[2..6], ["203.0.113.12", "public", "L2", "n1"]);
    assert_eq!(r.stdout.lines().count(), 5, "header and four Services: {}", r.stdout);

    // -n and -o json / yaml, and KUBECONFIG from the environment: the same data.
    let j = run(&kc, &["status", "-n", "shop", "-o", "json", "web"], true).await;
    assert!(j.ok, "{}", j.stderr);
    let rows: Value = serde_json::from_str(&j.stdout).unwrap();
    assert_eq!(rows[0]["namespace"], "shop");
    assert_eq!(rows[0]["addresses"], json!(["203.0.113.10"]));
    assert_eq!(rows[0]["pool"], json!({"name": "public", "source": "allocated", "valid": "True"}));
    assert_eq!(rows[0]["protocols"], json!(["BGP"]));
    assert_eq!(rows[0]["nodes"], json!(["n1", "n2"]));
    assert_eq!(rows[0]["peers"], json!(["router-a", "router-b"]));
    assert_eq!(rows[0]["readinessGate"]["ready"], 1);
    assert_eq!(
        rows[0]["readinessGate"]["pending"],
        json!(["web-2: AnnouncementPending: by BGP to router-a"])
    );
    assert_eq!(rows.as_array().unwrap().len(), 1);
    let y = run(&kc, &["status", "-n", "shop", "-o", "yaml", "web"], true).await;
    assert!(y.ok, "{}", y.stderr);
    let from_yaml: Value = serde_saphyr::from_str(&y.stdout).unwrap();
    assert_eq!(from_yaml, rows, "YAML and JSON carry the same rows");

    // The context's namespace (default) holds none: kubectl's message, on stderr.
    let empty = run(&kc, &["status"], true).await;
    assert!(empty.ok && empty.stdout.is_empty(), "{}", empty.stdout);
    assert_eq!(empty.stderr, "No LoadBalancer Services found in namespace default.\n");

    // pools: per pool and family.
    let p = run(&kc, &["pools"], false).await;
    assert!(p.ok, "{}", p.stderr);
    assert_eq!(
        cells(line(&p.stdout, "public   IPv4")),
        ["public", "IPv4", "2", "254", "0.7%", "true", "True", "<none>"]
    );
    assert_eq!(
        cells(line(&p.stdout, "public   IPv6")),
        ["public", "IPv6", "0", "256", "0.0%", "true", "True", "<none>"]
    );
    assert!(line(&p.stdout, "broken").contains("False   spec.addresses[0]"), "{}", p.stdout);
    let pj: Value = serde_json::from_str(&run(&kc, &["pools", "-o", "json"], false).await.stdout).unwrap();
    assert_eq!(pj[1]["name"], "public");
    assert_eq!((pj[1]["assigned"].clone(), pj[1]["available"].clone()), (json!(2), json!(254)));

    // peers: the nodes each peer selects, what the announcements send to it, and the note
    // that session state is not in the API.
    let pe = run(&kc, &["peers"], false).await;
    assert!(pe.ok, "{}", pe.stderr);
    assert_eq!(
        cells(line(&pe.stdout, "n1     router-a")),
        ["n1", "router-a", "192.0.2.1", "64512", "fast", "True", "1", "203.0.113.10"]
    );
    assert_eq!(
        cells(line(&pe.stdout, "n2     router-b")),
        ["n2", "router-b", "192.0.2.2", "64514", "<none>", "Unknown", "0", "<none>"]
    );
    assert!(!pe.stdout.contains("n3"), "router-a/b select role=edge only: {}", pe.stdout);
    assert!(pe.stderr.contains("not published in the Kubernetes API"), "{}", pe.stderr);

    // explain: the withdrawing node's reason; the pending Service's pool and address.
    let e = run(&kc, &["explain", "-n", "shop", "down"], false).await;
    assert!(e.ok, "{}", e.stderr);
    assert!(e.stdout.contains("Announced:   false"), "{}", e.stdout);
    assert!(
        e.stdout.contains(
            "Withdrawn:\n  n2: node n2 withdrew 203.0.113.11 (BGP): 203.0.113.11: no serving endpoint\n"
        ),
        "{}",
        e.stdout
    );
    let ej: Value = serde_json::from_str(
        &run(&kc, &["explain", "-n", "shop", "pending", "-o", "json"], false).await.stdout,
    )
    .unwrap();
    assert_eq!(ej["announced"], false);
    let problems: Vec<&str> =
        ej["problems"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert!(
        problems[0].starts_with("IPAddressPool broken is not Valid (status False): spec.addresses[0]"),
        "{problems:?}"
    );
    assert!(problems[1].starts_with("no address in status.loadBalancer.ingress"), "{problems:?}");
    let ey: Value = serde_saphyr::from_str(
        &run(&kc, &["explain", "-n", "shop", "web", "-o", "yaml"], false).await.stdout,
    )
    .unwrap();
    assert_eq!(ey["announced"], true);
    assert_eq!(
        ey["summary"],
        "announced by 2 node(s): n1 by BGP to router-a,router-b; n2 by BGP to router-a"
    );

    // Errors name what is wrong.
    let bad = run(&kc, &["--context", "nope", "pools"], false).await;
    assert!(!bad.ok && bad.stderr.contains("--kubeconfig"), "{}", bad.stderr);
    let missing = run(&kc, &["explain", "-n", "shop", "nope"], false).await;
    assert!(
        !missing.ok && missing.stderr.contains("Service \"nope\" not found in namespace shop"),
        "{}",
        missing.stderr
    );
}
