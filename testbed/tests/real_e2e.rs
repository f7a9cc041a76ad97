//! ferrolb end to end on the real control plane: kube-apiserver v1.37, etcd and
//! kube-controller-manager (its EndpointSlice controller and garbage collector),
//! ferrolb installed by `helm install` of its chart (the kustomize base's objects, as
//! testbed/tests/helm_chart.rs holds them), the controller and the speakers as processes with
//! their own ServiceAccounts' tokens, BIRD as the router and a client on the LAN.
//!
//! LoadBalancer Services of every shape get their addresses from the real controller
//! (IPv4, IPv6, dual-stack, a requested address, a shared address, policy Local), the
//! real EndpointSlices drive the speakers, the client reaches them; the readiness gate
//! flips a real pod's condition; deleting a Service lets the real garbage collector
//! remove its ServiceAnnouncements. At the end the audit log proves least privilege:
//! what each component did equals what its roles grant, up to the listed differences.
//!
//! Needs `target/kube/current/{ferrolb-kube,helm}` and the debug ferrolb binaries
//! (testbed/test.sh builds them first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ferrolb_bench::scale::traffic;
use ferrolb_cluster::audit::Request;
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::addressing::{node_ip as v4, node_ip6 as v6};
use ferrolb_lab::client::{self, HttpServer};
use ferrolb_lab::process::Proc;
use ferrolb_lab::routers::{self, Bird, RouterSpec};
use ferrolb_lab::speaker::yaml;
use ferrolb_lab::{Lab, LabConfig, addressing, wait};
use nix::sys::signal::Signal;
use serde_json::Value;

const T: Duration = Duration::from_secs(60);
const NS: &str = "e2e";
const PASSWORD: &str = "lab-md5-secret";
const GATE: &str = "ferrolb.io/load-balancer-ready";

/// Pools, peers (IPv4 and IPv6 sessions, TCP MD5 from a Secret) and advertisements.
fn configuration() -> String {
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: bgp-auth, namespace: ferrolb-system}}\nstringData: {{password: {PASSWORD}}}\n"
    );
    let peer = |name: &str, addr: IpAddr, family: &str| {
        yaml::peer(
            name,
            addressing::NODE_ASN,
            addressing::ROUTER_ASN,
            addr,
            &[
                &format!("addressFamilies: [{family}]"),
                "passwordSecret: {name: bgp-auth, namespace: ferrolb-system, key: password}",
            ],
        )
    };
    let lan = format!("{}-{}", addressing::L2_POOL_V4.0, addressing::L2_POOL_V4.1);
    yaml::stream(&[
        secret,
        yaml::pool("public", &["203.0.113.0/25", "2001:db8:3::/120"]),
        yaml::pool_manual("lan", &[&lan]),
        peer("router-v4", addressing::ROUTER_V4.into(), "ipv4-unicast"),
        peer("router-v6", addressing::ROUTER_V6.into(), "ipv6-unicast"),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]),
        // Unused by the speakers; here so that every kind's Valid condition is written
        // (the least-privilege check below sees the controller use each kind's grants).
        "apiVersion: ferrolb.io/v1alpha1\nkind: BFDProfile\nmetadata: {name: slow}\nspec: {}\n".into(),
        "apiVersion: ferrolb.io/v1alpha1\nkind: ControlPlaneVIP\nmetadata: {name: apiserver}\n\
         spec: {address: 203.0.113.200, mode: BGP, bgp: {peers: [router-v4]}}\n"
            .into(),
    ])
}

/// Every configuration object (`kubectl get ferrolb`: the category) carries Valid=True
/// from the controller.
fn every_object_valid(cluster: &Cluster) {
    let r = wait::until("Valid=True on every configuration object", T, || {
        let list: Value = serde_json::from_str(&cluster.kubectl(&["get", "ferrolb", "-o", "json"])?).unwrap();
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let not_yet: Vec<String> = items
            .iter()
            .filter(|o| {
                let conditions = o["status"]["conditions"].as_array().cloned().unwrap_or_default();
                !conditions.iter().any(|c| c["type"] == "Valid" && c["status"] == "True")
            })
            .map(|o| format!("{}/{}", o["kind"].as_str().unwrap_or(""), o["metadata"]["name"]))
            .collect();
        // 2 pools, 2 peers, 1 of each other kind; no ServiceAnnouncement in `default`.
        Ok((items.len() == 8 && not_yet.is_empty()).then_some(()))
    });
    assert!(r.is_ok(), "{r:?}\n{}", cluster.kubectl(&["get", "ferrolb"]).unwrap_or_default());
}

/// The workload: pods (bound to nodes; the testbed acts as their kubelet) and Services.
fn workload() -> String {
    let pod = |name: &str, app: &str, node: usize, gated: bool| {
        let gate =
            if gated { format!("\n  readinessGates: [{{conditionType: {GATE}}}]") } else { String::new() };
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}, labels: {{app: {app}}}}}\nspec:\n  nodeName: node{node}{gate}\n  containers: [{{name: web, image: example.invalid/web}}]\n"
        )
    };
    let svc = |name: &str, app: &str, port: u16, extra_spec: &str, annotations: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {NS}, annotations: {{{annotations}}}}}\nspec: {{type: LoadBalancer, selector: {{app: {app}}}, ports: [{{port: {port}, protocol: TCP}}]{extra_spec}}}\n"
        )
    };
    [
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"),
        pod("web-1", "web", 1, false),
        pod("web-2", "web", 2, false),
        pod("local-0", "local", 2, true),
        svc("web", "web", 80, "", ""),
        svc("web6", "web", 80, ", ipFamilies: [IPv6], ipFamilyPolicy: SingleStack", ""),
        svc("dual", "web", 80, ", ipFamilyPolicy: RequireDualStack", ""),
        svc("requested", "web", 80, "", "ferrolb.io/loadBalancerIPs: 203.0.113.77"),
        svc("shared-a", "web", 80, "", "ferrolb.io/allow-shared-ip: team"),
        svc("shared-b", "web", 81, "", "ferrolb.io/allow-shared-ip: team"),
        svc("local", "local", 80, ", externalTrafficPolicy: Local", ""),
        svc("l2web", "web", 80, "", "ferrolb.io/address-pool: lan"),
    ]
    .join("---\n")
}

fn ingress(cluster: &Cluster, name: &str) -> Vec<IpAddr> {
    cluster
        .kubectl(&["get", "svc", "-n", NS, name, "-o", "jsonpath={.status.loadBalancer.ingress[*].ip}"])
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect()
}

fn pod_json(cluster: &Cluster, name: &str) -> Value {
    serde_json::from_str(&cluster.kubectl(&["get", "pod", "-n", NS, name, "-o", "json"]).unwrap()).unwrap()
}

fn condition(pod: &Value, kind: &str) -> Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind).cloned())
        .unwrap_or(Value::Null)
}

fn announcements(cluster: &Cluster) -> BTreeSet<String> {
    cluster
        .kubectl(&["get", "serviceannouncements", "-n", NS, "-o", "jsonpath={.items[*].metadata.name}"])
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

fn start_speakers(lab: &Lab, cluster: &Cluster, tag: &str) -> Vec<Proc> {
    (1..=2)
        .map(|i| ferrolb::start_speaker(lab, cluster, i, tag, Some(SocketAddr::new(v4(i), 9121))).unwrap())
        .collect()
}

#[test]
fn ferrolb_on_the_real_apiserver_end_to_end_with_least_privilege() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
    ferrolb_cluster::helm::install(&cluster, &[]).unwrap();
    cluster.kubectl_stdin(&["apply", "-f", "-"], &configuration()).unwrap();
    cluster.kubectl_stdin(&["apply", "-f", "-"], &workload()).unwrap();
    let _servers: Vec<HttpServer> = (1..=2)
        .map(|i| {
            HttpServer::start(lab.node(i), "[::]:80".parse().unwrap(), &addressing::node_name(i)).unwrap()
        })
        .collect();

    let started = Instant::now();
    let _controller = ferrolb::start_controller(&lab, &cluster, 1, "controller-a", &[]).unwrap();
    let mut speakers = start_speakers(&lab, &cluster, "speaker");

    // Addresses from the real controller, for every shape of Service.
    let all = ["web", "web6", "dual", "requested", "shared-a", "shared-b", "local", "l2web"];
    let r = wait::until("every Service has its addresses", T, || {
        Ok(all.iter().all(|s| !ingress(&cluster, s).is_empty()).then_some(()))
    });
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
    println!("every Service addressed {:?} after the controller started", started.elapsed());
    let ip = |s: &str| ingress(&cluster, s);
    assert!(ip("web").len() == 1 && ip("web")[0].is_ipv4(), "web: {:?}", ip("web"));
    assert!(ip("web6").len() == 1 && ip("web6")[0].is_ipv6(), "web6: {:?}", ip("web6"));
    let dual = ip("dual");
    assert!(
        dual.len() == 2 && dual.iter().any(IpAddr::is_ipv4) && dual.iter().any(IpAddr::is_ipv6),
        "{dual:?}"
    );
    assert_eq!(ip("requested"), vec!["203.0.113.77".parse::<IpAddr>().unwrap()]);
    assert_eq!(ip("shared-a"), ip("shared-b"), "a shared address");
    let l2: IpAddr = ip("l2web")[0];
    assert!(l2.to_string().starts_with("192.0.2.2"), "l2web from pool lan: {l2}");
    let v4_addresses: BTreeSet<IpAddr> =
        all.iter().filter(|s| **s != "shared-b").flat_map(|s| ip(s)).filter(IpAddr::is_ipv4).collect();
    // web, dual, requested, the shared one, local, l2web.
    assert_eq!(
        v4_addresses.len(),
        6,
        "one distinct IPv4 address per Service but the sharing pair: {v4_addresses:?}"
    );
    let pools = cluster.kubectl(&["get", "ipaddresspool", "public", "-o", "jsonpath={.status}"]).unwrap();
    let pools: Value = serde_json::from_str(&pools).unwrap();
    assert_eq!(pools["assignedIPv4"], 5, "public: web, dual, requested, shared, local: {pools}");
    assert_eq!(pools["assignedIPv6"], 2, "public: web6, dual: {pools}");
    every_object_valid(&cluster);

    // No router yet: the gated pod behind the Local Service is held back by the speaker.
    let c = wait::until_value(
        "the gate written False",
        T,
        || Ok(condition(&pod_json(&cluster, "local-0"), GATE)),
        |c| c["status"] == "False",
    )
    .unwrap();
    assert_eq!(c["reason"], "AnnouncementPending", "{c}");
    assert_eq!(condition(&pod_json(&cluster, "local-0"), "Ready")["status"], "False");

    // The router comes: routes from the right nodes, for both families, over MD5 sessions.
    let bird = Bird::start(&lab, &RouterSpec::default().password(PASSWORD)).unwrap();
    let route = |addr: IpAddr, hops: &[IpAddr]| {
        let prefix = if addr.is_ipv4() { format!("{addr}/32") } else { format!("{addr}/128") };
        let r = routers::wait_rib(&bird, &prefix, hops, T);
        assert!(r.is_ok(), "{prefix}: {r:?}\n{}", lab.logs(40));
    };
    let both4 = [v4(1), v4(2)];
    let both6 = [v6(1), v6(2)];
    route(ip("web")[0], &both4);
    route(ip("web6")[0], &both6);
    for a in &dual {
        route(*a, if a.is_ipv4() { &both4 } else { &both6 });
    }
    route(ip("requested")[0], &both4);
    route(ip("shared-a")[0], &both4);
    // Local: only the node whose pod is gated on exactly this announcement.
    route(ip("local")[0], &[v4(2)]);
    println!("routes in BIRD {:?} after the controller started", started.elapsed());

    // The gate turns True once node2 really announced; the pod turns Ready; its
    // endpoint in the real EndpointSlice with it.
    wait::until_value(
        "the gate True",
        T,
        || Ok(condition(&pod_json(&cluster, "local-0"), GATE)),
        |c| c["status"] == "True",
    )
    .unwrap();
    ferrolb::wait_jsonpath(
        &cluster,
        &["endpointslices", "-n", NS, "-l", "kubernetes.io/service-name=local"],
        "{.items[*].endpoints[*].conditions.ready}",
        T,
        |s| s == "true",
    )
    .unwrap();

    // The client reaches the Services (the VIPs on the nodes' lo stand in for kube-proxy).
    for i in 1..=2 {
        for a in ip("web").into_iter().chain(ip("web6")).chain([l2]) {
            lab.add_vip_on_lo(lab.node(i), a).unwrap();
        }
    }
    for a in [ip("web")[0], ip("web6")[0], l2] {
        let body = wait::until(&format!("the client reaches {a}:80"), T, || {
            Ok(client::http_get(lab.client(), SocketAddr::new(a, 80), "/", Duration::from_secs(2)).ok())
        })
        .unwrap();
        assert!(body == "node1" || body == "node2", "{a}: {body}");
    }
    // L2: exactly one node answers ARP for the address.
    let macs = wait::until_value(
        "one ARP responder",
        T,
        || client::arp_responders(lab.client(), "eth0", l2, 2),
        |m| m.len() == 1,
    )
    .unwrap();
    assert!(macs.contains(&addressing::node_mac(1)) || macs.contains(&addressing::node_mac(2)), "{macs:?}");

    l2_speakers_read_the_published_node_facts(&lab, &cluster);

    // ServiceAnnouncements, owned by their Services.
    let names = announcements(&cluster);
    for want in ["web-node1-bgp", "web-node2-bgp", "local-node2-bgp", "requested-node1-bgp"] {
        assert!(names.contains(want), "{want} missing from {names:?}");
    }
    assert!(!names.contains("local-node1-bgp"), "{names:?}");
    assert_eq!(
        names.iter().filter(|n| n.starts_with("l2web-") && n.ends_with("-l2")).count(),
        1,
        "{names:?}"
    );
    let uid =
        cluster.kubectl(&["get", "svc", "-n", NS, "requested", "-o", "jsonpath={.metadata.uid}"]).unwrap();
    let owner = cluster
        .kubectl(&[
            "get",
            "serviceannouncement",
            "-n",
            NS,
            "requested-node1-bgp",
            "-o",
            "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}",
        ])
        .unwrap();
    assert_eq!(owner, format!("Service/{uid}"));

    // The real garbage collector, alone, removes a deleted Service's announcements:
    // the speakers are down meanwhile.
    for s in &mut speakers {
        s.signal(Signal::SIGKILL);
    }
    cluster.kubectl(&["delete", "svc", "-n", NS, "requested"]).unwrap();
    let t = Instant::now();
    wait::until_value(
        "requested's ServiceAnnouncements collected",
        T,
        || Ok(announcements(&cluster)),
        |n| !n.iter().any(|n| n.starts_with("requested-")),
    )
    .unwrap();
    println!("Service deleted → its ServiceAnnouncements collected by the GC in {:?}", t.elapsed());
    let gc_deletes = audit(&cluster)
        .into_iter()
        .filter(|e| {
            e.verb == "delete" && e.resource == "serviceannouncements" && e.name.starts_with("requested-")
        })
        .map(|e| e.user)
        .collect::<BTreeSet<_>>();
    assert_eq!(
        gc_deletes,
        BTreeSet::from(["system:serviceaccount:kube-system:generic-garbage-collector".to_string()])
    );
    // Back up, the speakers converge: everything but the deleted Service is announced.
    let _speakers = start_speakers(&lab, &cluster, "speaker-again");
    route(ip("web")[0], &both4);
    routers::wait_rib_gone(&bird, "203.0.113.77/32", T).unwrap();

    least_privilege(&cluster);
}

/// Watch events of `resource` speaker `i` received, bookmarks aside (its own metrics).
fn watch_events(lab: &Lab, i: usize, resource: &str) -> f64 {
    let addr = SocketAddr::new(v4(i), 9121);
    let text = client::http_get(lab.client(), addr, "/metrics", Duration::from_secs(2)).unwrap();
    let counters = traffic::parse(&text);
    counters.get(&("watch".to_owned(), resource.to_owned())).map_or(0.0, |c| (c.events - c.bookmarks) as f64)
}

/// L2 speakers elect from the Nodes' facts the real controller publishes (a ConfigMap per
/// Node, written when a fact changes) and watch their own Node alone: a kubelet's status
/// write on node2 reaches node1's speaker no more. Each round writes node2's heartbeat,
/// then labels node1, which changes node1's facts: once node1's speaker has the new facts
/// (a ConfigMap event), it has received its own Node's change, and node2's heartbeat
/// before it if it still watched every Node. Rounds go on until one shows its own Node's
/// event alone (the speakers start before the controller has published every Node's
/// facts, and watch every Node until then).
fn l2_speakers_read_the_published_node_facts(lab: &Lab, cluster: &Cluster) {
    ferrolb::wait_jsonpath(
        cluster,
        &["configmap", "-n", "ferrolb-system", "node-facts"],
        "{.metadata.name}",
        T,
        |s| s == "node-facts",
    )
    .unwrap();
    let mut round = 0;
    let r = wait::until("node1's speaker receives no other node's heartbeat", T, || {
        round += 1;
        let (nodes, facts) = (watch_events(lab, 1, "nodes"), watch_events(lab, 1, "configmaps"));
        let beat = format!(
            r#"{{"status":{{"conditions":[{{"type":"Ready","status":"True","lastHeartbeatTime":"2026-01-01T00:{:02}:00Z"}}]}}}}"#,
            round % 60
        );
        cluster.kubectl(&[
            "patch",
            "node",
            "node2",
            "--subresource=status",
            "--type=strategic",
            "-p",
            &beat,
        ])?;
        cluster.kubectl(&["label", "--overwrite", "node", "node1", &format!("e2e-round={round}")])?;
        wait::until_value("node1's new facts", T, || Ok(watch_events(lab, 1, "configmaps")), |n| *n > facts)?;
        let received = watch_events(lab, 1, "nodes") - nodes;
        println!("round {round}: node1's speaker received {received} Node event(s)");
        Ok((received == 1.0).then_some(()))
    });
    assert!(
        r.is_ok(),
        "{r:?}
{}",
        lab.logs(40)
    );
    let facts = cluster
        .kubectl(&[
            "get",
            "configmap",
            "-n",
            "ferrolb-system",
            "node-facts.node2",
            "-o",
            "jsonpath={.data.facts}",
        ])
        .unwrap();
    let facts: Value = serde_json::from_str(&facts).unwrap();
    assert_eq!(facts["ready"], true, "{facts}");
    assert_eq!(facts["addresses"][0], v4(2).to_string(), "{facts}");
}

/// The requests that named an object, from every apiserver's audit log.
fn audit(cluster: &Cluster) -> Vec<Request> {
    cluster.audit().into_iter().filter(|r| r.object).collect()
}

/// (apiGroup, resource[/subresource], verb).
type Grant = (String, String, String);

/// What the roles bound to `namespace/sa` grant, read back from the cluster.
fn grants(cluster: &Cluster, sa: &str) -> BTreeSet<Grant> {
    let get = |what: &str| -> Value {
        serde_json::from_str(&cluster.kubectl(&["get", what, "-A", "-o", "json"]).unwrap()).unwrap()
    };
    let bound_to_sa = |b: &Value| {
        b["subjects"].as_array().is_some_and(|s| {
            s.iter().any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == sa && s["namespace"] == ferrolb::NAMESPACE
            })
        })
    };
    let mut out = BTreeSet::new();
    for (bindings, roles) in [("clusterrolebindings", "clusterroles"), ("rolebindings", "roles")] {
        let roles = get(roles);
        for b in get(bindings)["items"].as_array().unwrap().iter().filter(|b| bound_to_sa(b)) {
            let role = roles["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| {
                    r["metadata"]["name"] == b["roleRef"]["name"]
                        && r["metadata"]["namespace"] == b["metadata"]["namespace"]
                })
                .unwrap_or_else(|| panic!("{} names a missing role", b["metadata"]["name"]));
            for rule in role["rules"].as_array().unwrap() {
                let list = |k: &str| -> Vec<String> {
                    rule[k]
                        .as_array()
                        .map(|a| a.iter().filter_map(|v| v.as_str().map(String::from)).collect())
                        .unwrap_or_default()
                };
                for g in list("apiGroups") {
                    for r in list("resources") {
                        for v in list("verbs") {
                            out.insert((g.clone(), r.clone(), v));
                        }
                    }
                }
            }
        }
    }
    out
}

/// Grants a component holds but did not use in this test, each with its reason:
/// (ServiceAccount, apiGroup, resource, verb, why).
const UNUSED_ON_PURPOSE: &[(&str, &str, &str, &str, &str)] = &[
    (
        "ferrolb-controller",
        "events.k8s.io",
        "events",
        "patch",
        "kube's Recorder patches an Event only when the same Event repeats (its series); each Event here is new",
    ),
    (
        "ferrolb-controller",
        "",
        "configmaps",
        "create",
        "the Nodes' facts are written by server-side apply, audited as `patch` but authorized as `create` too \
         for a new ConfigMap",
    ),
    (
        "ferrolb-controller",
        "",
        "configmaps",
        "delete",
        "a Node's facts are deleted with the Node, and all of them when the last L2Advertisement goes; \
         neither happens here",
    ),
    (
        "ferrolb-speaker",
        "ferrolb.io",
        "serviceannouncements",
        "create",
        "server-side apply of a new object is audited as `patch` but authorized as `create` too (without it: 403)",
    ),
    (
        "ferrolb-speaker",
        "ferrolb.io",
        "serviceannouncements",
        "delete",
        "a speaker deletes this node's stale or withdrawn ServiceAnnouncements; whether one is left for the \
         restarted speakers here depends on how fast the garbage collector was",
    ),
    (
        "ferrolb-speaker",
        "events.k8s.io",
        "events",
        "patch",
        "kube's Recorder patches an Event only when the same Event repeats (its series); each Event here is new",
    ),
];

fn least_privilege(cluster: &Cluster) {
    let requests = audit(cluster);
    let mut report = String::new();
    let mut failures = Vec::new();
    for sa in [ferrolb::CONTROLLER_SA, ferrolb::SPEAKER_SA] {
        let user = format!("system:serviceaccount:{}:{sa}", ferrolb::NAMESPACE);
        let mine: Vec<&Request> = requests.iter().filter(|r| r.user == user).collect();
        assert!(!mine.is_empty(), "no request of {user} in the audit log");
        let forbidden: BTreeSet<_> = mine
            .iter()
            .filter(|r| r.decision == "forbid")
            .map(|r| (&r.verb, &r.group, &r.resource, &r.name))
            .collect();
        if !forbidden.is_empty() {
            failures.push(format!("{sa} was refused: {forbidden:?}"));
        }
        let used: BTreeMap<Grant, usize> = mine.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry((r.group.clone(), r.resource.clone(), r.verb.clone())).or_default() += 1;
            m
        });
        let granted = grants(cluster, sa);
        report.push_str(&format!("{sa}: {} requests\n", mine.len()));
        for (g, n) in &used {
            report.push_str(&format!("  used    {:>5}  {}\n", n, fmt(g)));
        }
        for g in granted.iter().filter(|g| !used.contains_key(*g)) {
            let excused = UNUSED_ON_PURPOSE.iter().find(|(who, group, res, verb, _)| {
                *who == sa && *group == g.0 && *res == g.1 && *verb == g.2
            });
            match excused {
                Some((.., why)) => report.push_str(&format!("  unused         {}  — {why}\n", fmt(g))),
                None => failures.push(format!("{sa} holds {} but never used it", fmt(g))),
            }
        }
        for g in used.keys().filter(|g| !granted.contains(*g)) {
            failures.push(format!("{sa} used {} without a grant for it", fmt(g)));
        }
    }
    println!("{report}");
    assert!(failures.is_empty(), "least privilege:\n{}\n{report}", failures.join("\n"));
}

fn fmt(g: &Grant) -> String {
    format!("{} {}{}", g.2, if g.0.is_empty() { String::new() } else { format!("{}/", g.0) }, g.1)
}
