//! The CRD schemas and the validator agree: for every object of a corpus of good and bad
//! objects, the real kube-apiserver (v1.37, which runs the CEL rules) accepts it at
//! `kubectl apply --dry-run=server` exactly when `ferrolb_api::validate` finds it valid.
//! Objects the validator rejects only by looking at other objects (a pool that does not
//! exist, overlapping pools, a VIP inside a pool) or by a check a schema cannot express
//! on Kubernetes 1.29 (CIDR host bits, reversed ranges, IP equality, URL hosts: no CEL
//! IP library there) are marked validator-only: the apiserver must accept them.
//!
//! Needs `target/kube/current/ferrolb-kube` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use ferrolb_api::validate::{Config, Origin, errors_for, validate};
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::{Lab, LabConfig};

/// Objects other corpus objects refer to; validated with each case, never applied.
const CONTEXT: &str = "\
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: public}
spec: {addresses: [203.0.113.0/24]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-a}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.250}
---
apiVersion: ferrolb.io/v1alpha1
kind: BFDProfile
metadata: {name: fast}
spec: {}
";

/// A corpus entry: the apiserver decides alone unless `validator_only`.
struct Case {
    kind: &'static str,
    spec: &'static str,
    validator_only: bool,
}

const fn both(kind: &'static str, spec: &'static str) -> Case {
    Case { kind, spec, validator_only: false }
}

const fn validator_only(kind: &'static str, spec: &'static str) -> Case {
    Case { kind, spec, validator_only: true }
}

const POOL: &str = "IPAddressPool";
const PEER: &str = "BGPPeer";
const BGPADV: &str = "BGPAdvertisement";
const L2ADV: &str = "L2Advertisement";
const BFD: &str = "BFDProfile";
const VIP: &str = "ControlPlaneVIP";

const PEER_BASE: &str = "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}";

fn corpus() -> Vec<Case> {
    vec![
        // IPAddressPool: entry syntax, prefix lengths, families, namespaces.
        both(POOL, r#"{addresses: ["198.51.100.0/28", "198.51.100.20-198.51.100.30", "2001:db8:3::/120"]}"#),
        both(
            POOL,
            r#"{addresses: ["198.51.100.77"], serviceAllocation: {priority: 10, namespaces: [team-a]}}"#,
        ),
        both(POOL, r#"{addresses: []}"#),
        both(POOL, r#"{addresses: ["198.51.100.0/33"]}"#),
        both(POOL, r#"{addresses: ["2001:db8:4::/129"]}"#),
        both(POOL, r#"{addresses: ["198.51.100.300/32"]}"#),
        both(POOL, r#"{addresses: ["pool-a"]}"#),
        both(POOL, r#"{addresses: ["198.51.100.1 - 198.51.100.9"]}"#),
        both(POOL, r#"{addresses: ["198.51.100.1-2001:db8::1"]}"#),
        both(POOL, r#"{addresses: ["198.51.100.0/24"], serviceAllocation: {namespaces: [Team_A]}}"#),
        both(POOL, r#"{addresses: ["198.51.100.0/24"], serviceAllocation: {namespaces: [a.b]}}"#),
        validator_only(POOL, r#"{addresses: ["198.51.100.1/24"]}"#), // host bits
        validator_only(POOL, r#"{addresses: ["198.51.100.9-198.51.100.1"]}"#), // reversed
        validator_only(POOL, r#"{addresses: ["203.0.113.128/25"]}"#), // overlaps pool "public"
        validator_only(POOL, r#"{addresses: ["198.51.100.0/24", "198.51.100.7"]}"#), // overlap within
        // BGPPeer: ASNs, addresses, timers and their relations, passwords, families.
        both(PEER, PEER_BASE),
        both(
            PEER,
            "{myASN: 4294967295, peerASN: 1, peerAddress: '2001:db8::1', sourceAddress: '2001:db8::2'}",
        ),
        both(PEER, "{myASN: 0, peerASN: 64512, peerAddress: 192.0.2.1}"),
        both(PEER, "{myASN: 64513, dynamicASN: external, peerAddress: 192.0.2.1}"),
        both(PEER, "{myASN: 64513, dynamicASN: internal, peerAddress: 192.0.2.1}"),
        both(PEER, "{myASN: 64513, dynamicASN: sideways, peerAddress: 192.0.2.1}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, dynamicASN: external, peerAddress: 192.0.2.1}"),
        both(PEER, "{myASN: 64513, peerAddress: 192.0.2.1}"),
        // Unnumbered: an interface instead of the address, never both, never neither.
        both(PEER, "{myASN: 64513, peerASN: 64512, interface: p2p0}"),
        both(PEER, "{myASN: 64513, dynamicASN: external, interface: swp1, sourceAddress: 192.0.2.11}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, interface: p2p0, peerAddress: 192.0.2.1}"),
        both(PEER, "{myASN: 64513, peerASN: 64512}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, interface: 'eth/0'}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, interface: p2p0, bfdProfile: fast}"),
        both(PEER, "{myASN: 4294967296, peerASN: 64512, peerAddress: 192.0.2.1}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, peerPort: 0}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: router.example}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, sourceAddress: '2001:db8::2'}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, routerID: '2001:db8::2'}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 3s, keepaliveTime: 1s}"),
        both(
            PEER,
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 1m30s, keepaliveTime: 30s}",
        ),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 90}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 2s}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 65536s}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 4.5s}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 0s}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 0s, bfdProfile: fast}"),
        both(
            PEER,
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 30s, keepaliveTime: 31s}",
        ),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, keepaliveTime: 91s}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, connectTime: 0s}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, connectTime: 5 days}"),
        both(
            PEER,
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, ttlSecurity: true, ebgpMultiHop: true}",
        ),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, ttlSecurity: true}"),
        both(
            PEER,
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, passwordSecret: {name: bgp-auth, namespace: ferrolb-system, key: password}}",
        ),
        both(
            PEER,
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, passwordSecret: {name: '', namespace: ferrolb-system, key: password}}",
        ),
        both(
            PEER,
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, passwordFile: /etc/ferrolb/bgp-password}",
        ),
        both(
            PEER,
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, gracefulRestart: {restartTime: 4095s}}",
        ),
        both(
            PEER,
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, gracefulRestart: {restartTime: 4096s}}",
        ),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, addressFamilies: [ipv6-unicast]}"),
        both(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, addressFamilies: []}"),
        both(
            PEER,
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, addressFamilies: [ipv4-multicast]}",
        ),
        both(
            PEER,
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, addressFamilies: [ipv4-unicast, ipv4-unicast]}",
        ),
        validator_only(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, bfdProfile: missing}"),
        validator_only(PEER, "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.250}"), // same as router-a
        // BGPAdvertisement: prefix lengths, communities.
        both(
            BGPADV,
            r#"{ipAddressPools: [public], peers: [router-a], communities: ["64512:100", "large:64512:1:2", "no-export", "NO-ADVERTISE"]}"#,
        ),
        both(BGPADV, r#"{aggregationLength: 24, aggregationLengthV6: 64, localPref: 100}"#),
        both(BGPADV, r#"{aggregationLength: 33}"#),
        both(BGPADV, r#"{linkBandwidth: endpoints}"#),
        both(BGPADV, r#"{linkBandwidth: 10G}"#),
        both(BGPADV, r#"{linkBandwidth: 10g}"#),
        both(BGPADV, r#"{linkBandwidth: "1.5G"}"#),
        validator_only(BGPADV, r#"{linkBandwidth: 500K}"#),
        both(BGPADV, r#"{aggregationLength: -1}"#),
        both(BGPADV, r#"{aggregationLengthV6: 129}"#),
        both(BGPADV, r#"{communities: ["65536:1"]}"#),
        both(BGPADV, r#"{communities: ["64512"]}"#),
        both(BGPADV, r#"{communities: ["large:1:2"]}"#),
        both(BGPADV, r#"{communities: ["large:4294967296:0:0"]}"#),
        both(BGPADV, r#"{communities: ["no-such-community"]}"#),
        both(BGPADV, r#"{communities: [" 64512:100"]}"#),
        validator_only(BGPADV, r#"{ipAddressPools: [missing]}"#),
        validator_only(BGPADV, r#"{peers: [missing]}"#),
        // L2Advertisement: interface names.
        both(L2ADV, r#"{ipAddressPools: [public], interfaces: [eth0, bond0.100, "enp0s31f6"]}"#),
        both(L2ADV, r#"{interfaces: ["a-very-long-name0"]}"#),
        both(L2ADV, r#"{interfaces: ["eth/0"]}"#),
        both(L2ADV, r#"{interfaces: ["eth0:1"]}"#),
        both(L2ADV, r#"{interfaces: ["eth 0"]}"#),
        both(L2ADV, r#"{interfaces: [".."]}"#),
        both(L2ADV, r#"{interfaces: [""]}"#),
        validator_only(L2ADV, r#"{ipAddressPools: [missing]}"#),
        both(
            L2ADV,
            "{nodePreferences: [{nodeSelector: {matchLabels: {rack: r1}}, weight: 100}, {nodeSelector: {}}]}",
        ),
        both(L2ADV, "{nodePreferences: [{nodeSelector: {matchLabels: {rack: r1}}, weight: 0}]}"),
        both(L2ADV, "{nodePreferences: [{nodeSelector: {matchLabels: {rack: r1}}, weight: 101}]}"),
        both(L2ADV, "{nodePreferences: [{weight: 5}]}"),
        validator_only(
            L2ADV,
            "{nodePreferences: [{nodeSelector: {matchExpressions: [{key: rack, operator: In}]}}]}",
        ),
        // BFDProfile: interval ranges and syntax, multiplier, TTL.
        both(BFD, "{receiveInterval: 10ms, transmitInterval: 60s, detectMultiplier: 2, minimumTtl: 1}"),
        both(BFD, "{receiveInterval: 9ms}"),
        both(BFD, "{transmitInterval: 61s}"),
        both(BFD, "{transmitInterval: 300}"),
        both(BFD, "{detectMultiplier: 1}"),
        both(BFD, "{detectMultiplier: 256}"),
        both(BFD, "{minimumTtl: 255}"),
        both(BFD, "{minimumTtl: 0}"),
        // ControlPlaneVIP: address, ports, members, modes, health check.
        both(
            VIP,
            "{address: 192.0.2.100, members: [{name: cp1, address: 192.0.2.11}, {name: cp2, address: 192.0.2.12}]}",
        ),
        both(VIP, "{address: 192.0.2.101, mode: BGP, bgp: {peers: [router-a], communities: ['64512:1']}}"),
        both(VIP, "{address: 192.0.2.300, members: [{name: cp1, address: 192.0.2.11}]}"),
        both(VIP, "{address: 192.0.2.102}"),
        both(VIP, "{address: 192.0.2.103, mode: BGP}"),
        both(VIP, "{address: 192.0.2.104, mode: Anycast, members: [{name: cp1, address: 192.0.2.11}]}"),
        both(
            VIP,
            "{address: 192.0.2.105, membershipPort: 7946, members: [{name: cp1, address: 192.0.2.11}]}",
        ),
        both(
            VIP,
            "{address: 192.0.2.106, members: [{name: cp1, address: 192.0.2.11}, {name: cp1, address: 192.0.2.12}]}",
        ),
        both(VIP, "{address: 192.0.2.107, members: [{name: CP1, address: 192.0.2.11}]}"),
        both(VIP, "{address: 192.0.2.108, members: [{name: cp1, address: node1}]}"),
        both(
            VIP,
            "{address: 192.0.2.109, membershipKeyFile: key, members: [{name: cp1, address: 192.0.2.11}]}",
        ),
        both(
            VIP,
            "{address: 192.0.2.110, healthCheck: {interval: 0s}, members: [{name: cp1, address: 192.0.2.11}]}",
        ),
        both(
            VIP,
            "{address: 192.0.2.111, healthCheck: {failureThreshold: 0}, members: [{name: cp1, address: 192.0.2.11}]}",
        ),
        both(VIP, "{address: 192.0.2.112, interface: 'eth/0', members: [{name: cp1, address: 192.0.2.11}]}"),
        validator_only(VIP, "{address: 192.0.2.113, mode: BGP, bgp: {peers: [missing]}}"),
        validator_only(VIP, "{address: 203.0.113.5, members: [{name: cp1, address: 192.0.2.11}]}"), // in a pool
        validator_only(VIP, "{address: 192.0.2.11, members: [{name: cp1, address: 192.0.2.11}]}"), // a member's
        validator_only(
            VIP,
            "{address: 192.0.2.114, healthCheck: {url: 'https://192.0.2.11:6443/readyz', insecureSkipVerify: true}, members: [{name: cp1, address: 192.0.2.11}]}",
        ),
    ]
}

/// Each case as one object named `case-N`.
fn objects() -> Vec<(String, String, &'static Case)> {
    let cases: &'static [Case] = Box::leak(corpus().into_boxed_slice());
    cases
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let name = format!("case-{i}");
            let yaml = format!(
                "apiVersion: ferrolb.io/v1alpha1\nkind: {}\nmetadata: {{name: {name}}}\nspec: {}\n",
                c.kind, c.spec
            );
            (name, yaml, c)
        })
        .collect()
}

/// The validator's verdict on one object, with the context objects it may refer to.
fn validator_accepts(name: &str, kind: &str, yaml: &str) -> Result<(), String> {
    let context = ferrolb_api::parse_stream("context", CONTEXT).unwrap().config();
    let one = ferrolb_api::parse_stream(name, yaml).map_err(|e| e.to_string())?.config();
    let config = Config {
        pools: [context.pools, one.pools].concat(),
        peers: [context.peers, one.peers].concat(),
        bgp_advertisements: one.bgp_advertisements,
        l2_advertisements: one.l2_advertisements,
        bfd_profiles: [context.bfd_profiles, one.bfd_profiles].concat(),
        control_plane_vips: one.control_plane_vips,
    };
    let errors = validate(&config, Origin::Cluster);
    let mine: Vec<String> = errors_for(&errors, kind, name).map(ToString::to_string).collect();
    if mine.is_empty() { Ok(()) } else { Err(mine.join("\n")) }
}

#[test]
fn the_apiserver_and_the_validator_agree_on_every_corpus_object() {
    let objects = objects();
    // The validator's verdicts need no cluster: check them first, so a corpus mistake
    // shows without waiting for the control plane.
    let verdicts: Vec<Result<(), String>> =
        objects.iter().map(|(name, yaml, c)| validator_accepts(name, c.kind, yaml)).collect();
    for ((name, yaml, c), verdict) in objects.iter().zip(&verdicts) {
        if c.validator_only {
            assert!(
                verdict.is_err(),
                "{name} is marked validator-only but the validator accepts it:\n{yaml}"
            );
        }
    }
    let goods = verdicts.iter().filter(|v| v.is_ok()).count();
    assert!(goods >= 8 && objects.len() - goods >= 40, "{goods} good of {}", objects.len());

    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
    let crds = ferrolb::manifests_dir().join("crds");
    cluster.kubectl(&["apply", "-k", &crds.display().to_string()]).unwrap();
    cluster.kubectl(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"]).unwrap();

    let mut disagreements = Vec::new();
    for ((name, yaml, c), verdict) in objects.iter().zip(&verdicts) {
        let served = cluster.kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], yaml);
        let want_accepted = verdict.is_ok() || c.validator_only;
        match (&served, want_accepted) {
            (Ok(_), true) | (Err(_), false) => {}
            (Ok(_), false) => disagreements.push(format!(
                "{name}: the apiserver accepts what the validator rejects:\n{yaml}{}",
                verdict.as_ref().err().cloned().unwrap_or_default()
            )),
            (Err(e), true) => {
                disagreements.push(format!("{name}: the apiserver rejects a valid object:\n{yaml}{e}"))
            }
        }
        // A rejection names the field, so users know what to fix.
        if let Err(e) = &served
            && !want_accepted
            && !e.to_string().contains("spec")
        {
            disagreements.push(format!("{name}: the apiserver's message names no field: {e}"));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} disagreements:\n\n{}",
        disagreements.len(),
        disagreements.join("\n\n")
    );
}
