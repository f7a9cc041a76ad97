//! `migrate-from-metallb`: a MetalLB configuration of every kind converts into objects
//! that pass ferrolb's validator, and every field that cannot be converted is listed.

// Test helpers: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

use ferrolb_api::{Object, Origin, parse_stream};
use ferrolb_controller::migrate::{Conversion, Unconverted, convert};

fn fixture(name: &str) -> (String, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/metallb").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    (path.display().to_string(), text)
}

fn converted(name: &str) -> Conversion {
    let (path, text) = fixture(name);
    convert(&text, &path).unwrap()
}

fn lines(c: &Conversion) -> Vec<(String, String)> {
    c.unconverted.iter().map(|u| (u.object.clone(), u.field.clone())).collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected.iter().map(|(o, f)| (o.to_string(), f.to_string())).collect()
}

fn find<'a>(c: &'a Conversion, kind: &str, name: &str) -> &'a Object {
    c.objects
        .iter()
        .find(|o| o.kind() == kind && o.name() == name)
        .unwrap_or_else(|| panic!("no {kind}/{name}"))
}

#[test]
fn every_metallb_kind_converts_into_valid_ferrolb_objects() {
    let c = converted("config.yaml");
    assert!(c.invalid.is_empty(), "{:#?}", c.invalid);
    let names: Vec<String> = c.objects.iter().map(|o| format!("{}/{}", o.kind(), o.name())).collect();
    assert_eq!(
        names,
        [
            "IPAddressPool/public",
            "IPAddressPool/lan",
            "IPAddressPool/team-a",
            "BFDProfile/fast",
            "BFDProfile/defaults",
            "BGPPeer/router-a",
            "BGPPeer/router-b",
            "BGPPeer/unnumbered",
            "BGPPeer/spine",
            "BGPAdvertisement/public",
            "BGPAdvertisement/team-a-aggregate",
            "L2Advertisement/lan",
            "L2Advertisement/lan-by-label",
        ]
    );

    // The round trip through YAML gives the same objects, and they validate as a cluster
    // configuration.
    let stream = parse_stream("converted", &c.to_yaml().unwrap()).unwrap();
    assert_eq!(stream.objects.iter().map(|(_, o)| o.clone()).collect::<Vec<_>>(), c.objects);
    stream.config().validate(Origin::Cluster).unwrap();

    let Object::IpAddressPool(public) = find(&c, "IPAddressPool", "public") else { unreachable!() };
    assert!(public.spec.avoid_buggy_ips && public.spec.auto_assign);
    let labels = public.metadata.labels.clone().unwrap();
    assert_eq!(labels["exposure"], "internet", "labels stay: pool selectors match them");
    assert!(public.metadata.annotations.is_none(), "kubectl's last-applied annotation is dropped");
    assert!(public.metadata.namespace.is_none() && public.metadata.uid.is_none());
    assert!(public.status.is_none());

    let Object::IpAddressPool(lan) = find(&c, "IPAddressPool", "lan") else { unreachable!() };
    assert_eq!(lan.spec.addresses, ["192.0.2.200-192.0.2.250", "2001:db8::200-2001:db8::250"]);
    let Object::IpAddressPool(team) = find(&c, "IPAddressPool", "team-a") else { unreachable!() };
    assert_eq!(team.spec.addresses, ["198.51.100.16/28", "198.51.100.32/29"]);
    assert!(!team.spec.auto_assign);
    let alloc = team.spec.service_allocation.as_ref().unwrap();
    assert_eq!((alloc.priority, alloc.namespaces.as_slice()), (Some(10), &["team-a".to_owned()][..]));
    assert_eq!((alloc.namespace_selectors.len(), alloc.service_selectors.len()), (1, 1));

    let Object::BfdProfile(fast) = find(&c, "BFDProfile", "fast") else { unreachable!() };
    assert_eq!(
        (fast.spec.receive_interval.as_str(), fast.spec.transmit_interval.as_str()),
        ("200ms", "200ms")
    );
    assert_eq!((fast.spec.detect_multiplier, fast.spec.minimum_ttl), (5, 254));

    let Object::BgpPeer(a) = find(&c, "BGPPeer", "router-a") else { unreachable!() };
    assert_eq!(
        (a.spec.my_asn, a.spec.peer_asn, a.spec.peer_address.as_deref().unwrap_or_default()),
        (64513, Some(64512), "192.0.2.1")
    );
    assert_eq!((a.spec.hold_time.as_str(), a.spec.keepalive_time.as_deref()), ("1m30s", Some("30s")));
    assert_eq!(a.spec.router_id.as_deref(), Some("192.0.2.11"));
    assert_eq!(a.spec.bfd_profile.as_deref(), Some("fast"));
    let secret = a.spec.password_secret.as_ref().unwrap();
    assert_eq!(
        (secret.namespace.as_str(), secret.name.as_str(), secret.key.as_str()),
        ("ferrolb-system", "router-a-bgp-password", "password")
    );
    assert_eq!(a.spec.node_selectors.len(), 1);
    assert!(
        a.spec.node_selectors[0].match_expressions.is_some()
            && a.spec.node_selectors[0].match_labels.is_some()
    );

    let Object::BgpPeer(b) = find(&c, "BGPPeer", "router-b") else { unreachable!() };
    assert_eq!(b.spec.address_families, [ferrolb_api::AddressFamily::Ipv6Unicast], "disableMP");
    assert!(b.spec.graceful_restart.as_ref().unwrap().enabled);
    assert_eq!(b.spec.connect_time, "10s");
    assert_eq!(b.spec.source_address.as_deref(), Some("2001:db8::11"));
    let secret = b.spec.password_secret.as_ref().unwrap();
    assert_eq!(
        (secret.namespace.as_str(), secret.name.as_str()),
        ("ferrolb-system", "router-b-auth"),
        "a copy the speaker may read, not MetalLB's Secret"
    );
    let emitted: Vec<&str> = c.secrets.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(emitted, ["router-a-bgp-password"], "the inline password becomes a Secret");
    assert!(c.commands.iter().any(|c| c.starts_with("kubectl -n metallb-system get secret router-b-auth ")));

    let Object::BgpPeer(spine) = find(&c, "BGPPeer", "spine") else { unreachable!() };
    assert_eq!(
        (spine.spec.peer_asn, spine.spec.dynamic_asn),
        (None, Some(ferrolb_api::DynamicAsn::Internal))
    );
    assert!(spine.spec.is_ibgp());

    let Object::BgpPeer(unnumbered) = find(&c, "BGPPeer", "unnumbered") else { unreachable!() };
    assert_eq!(
        (unnumbered.spec.interface.as_deref(), unnumbered.spec.peer_address.as_deref()),
        (Some("eth1"), None),
        "BGP unnumbered: the same field"
    );
    assert_eq!(unnumbered.spec.dynamic_asn, Some(ferrolb_api::DynamicAsn::External));

    let Object::BgpAdvertisement(adv) = find(&c, "BGPAdvertisement", "public") else { unreachable!() };
    assert_eq!(adv.spec.communities, ["64512:1", "64512:200", "large:64512:2:3", "65535:65282"], "aliases");
    assert_eq!((adv.spec.local_pref, adv.spec.peers.len()), (Some(100), 2));
    let Object::BgpAdvertisement(agg) = find(&c, "BGPAdvertisement", "team-a-aggregate") else {
        unreachable!()
    };
    assert_eq!((agg.spec.aggregation_length, agg.spec.ip_address_pool_selectors.len()), (28, 1));
    assert!(agg.spec.communities.is_empty());

    let Object::L2Advertisement(l2) = find(&c, "L2Advertisement", "lan") else { unreachable!() };
    assert_eq!(
        (l2.spec.interfaces.as_slice(), l2.spec.node_selectors.len()),
        (&["eth0".into(), "bond0".into()][..], 1)
    );
}

#[test]
fn what_cannot_be_converted_is_listed_exactly() {
    let c = converted("config.yaml");
    assert_eq!(
        lines(&c),
        pairs(&[
            ("IPAddressPool metallb-system/team-a", "spec.addresses[2]"),
            ("BFDProfile metallb-system/fast", "spec.echoMode"),
            ("BFDProfile metallb-system/fast", "spec.echoInterval"),
            ("BGPPeer metallb-system/router-vrf", "spec.vrf"),
            ("BGPAdvertisement metallb-system/team-a-aggregate", "spec.communities[0]"),
            ("BGPAdvertisement metallb-system/team-a-aggregate", "spec.futureKnob"),
            ("ServiceL2Status default/l2-abc12", "kind"),
        ])
    );
    let why = |field: &str| c.unconverted.iter().find(|u| u.field == field).unwrap().why.clone();
    assert!(why("spec.vrf").contains("the BGPPeer was not converted"));
    assert!(why("spec.communities[0]").contains("\"no-such-alias\""));
    for u in &c.unconverted {
        assert!(!u.to_string().contains("hunter2"), "a password leaked: {u}");
    }
}

#[test]
fn service_annotations_of_both_prefixes_convert() {
    let c = converted("services.yaml");
    assert!(c.invalid.is_empty());
    let services: Vec<(String, std::collections::BTreeMap<String, String>)> = c
        .objects
        .iter()
        .map(|o| match o {
            Object::Service(s) => (
                format!("{}/{}", s.metadata.namespace.clone().unwrap(), o.name()),
                s.metadata.annotations.clone().unwrap(),
            ),
            other => panic!("unexpected {}", other.kind()),
        })
        .collect();
    let ann = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert_eq!(
        services,
        [
            (
                "default/web".to_owned(),
                ann(&[
                    ("ferrolb.io/address-pool", "lan"),
                    ("ferrolb.io/allow-shared-ip", "web"),
                    ("ferrolb.io/loadBalancerIPs", "192.0.2.210"),
                ])
            ),
            (
                "infra/dns".to_owned(),
                ann(&[
                    ("ferrolb.io/allow-shared-ip", "dns"),
                    ("ferrolb.io/loadBalancerIPs", "203.0.113.53,2001:db8:3::53"),
                ])
            ),
            (
                "team-a/legacy".to_owned(),
                ann(&[
                    ("ferrolb.io/address-pool", "public"),
                    ("ferrolb.io/loadBalancerIPs", "198.51.100.20")
                ])
            ),
        ],
        "only annotated Services, holding only ferrolb annotations (others stay as they are)"
    );
    for o in &c.objects {
        let Object::Service(s) = o else { unreachable!() };
        assert!(s.spec.is_none() && s.status.is_none(), "applying it must change nothing else");
    }
    assert_eq!(
        lines(&c),
        pairs(&[
            ("Service default/web", "metadata.annotations[metallb.universe.tf/ip-allocated-from-pool]"),
            ("Service team-a/legacy", "metadata.annotations[metallb.universe.tf/address-pool]"),
            ("Service team-a/legacy", "metadata.annotations[metallb.universe.tf/some-future-annotation]"),
            ("Service team-a/legacy", "spec.loadBalancerClass"),
            ("ConfigMap metallb-system/config", "data.config"),
        ])
    );
}

#[test]
fn converted_objects_that_break_ferrolb_rules_are_reported() {
    // MetalLB accepts overlapping pools across objects only by accident; ferrolb's
    // validator says so before anything is applied.
    let input = "\
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: a, namespace: metallb-system}
spec: {addresses: [192.0.2.0/28]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: b, namespace: metallb-system}
spec: {addresses: [192.0.2.8-192.0.2.9]}
";
    let c = convert(input, "overlap.yaml").unwrap();
    assert_eq!(c.objects.len(), 2);
    let fields: Vec<(&str, &str)> = c.invalid.iter().map(|e| (e.name.as_str(), e.field.as_str())).collect();
    assert_eq!(fields, [("a", "spec.addresses[0]"), ("b", "spec.addresses[0]")]);
}

/// MetalLB takes `holdTime: 0s` (no keepalives); ferrolb refuses it without BFD, since
/// nothing would notice a dead router: the conversion keeps the value and says so.
#[test]
fn a_zero_hold_time_without_bfd_is_reported() {
    let peer = |extra: &str| {
        format!(
            "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {{name: r, namespace: metallb-system}}\n\
             spec: {{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 0s{extra}}}\n"
        )
    };
    let c = convert(&peer(""), "peer.yaml").unwrap();
    let fields: Vec<(&str, &str)> = c.invalid.iter().map(|e| (e.name.as_str(), e.field.as_str())).collect();
    assert_eq!(fields, [("r", "spec.holdTime")]);
    let bfd = "\n---\napiVersion: metallb.io/v1beta1\nkind: BFDProfile\nmetadata: {name: fast, namespace: metallb-system}\nspec: {}\n";
    let c = convert(&format!("{}{bfd}", peer(", bfdProfile: fast")), "peer.yaml").unwrap();
    assert!(c.invalid.is_empty(), "{:?}", c.invalid);
}

#[test]
fn unreadable_input_names_the_document() {
    let err = convert("apiVersion: v1\n---\nkind: [unclosed\n", "bad.yaml").unwrap_err().to_string();
    assert!(err.starts_with("bad.yaml: document 2: invalid YAML"), "{err}");
    let u = Unconverted { object: "BGPPeer x/y".into(), field: "spec.vrf".into(), why: "because".into() };
    assert_eq!(u.to_string(), "BGPPeer x/y: spec.vrf: because");
}

fn run_cli(file: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferrolb-controller"))
        .args(["migrate-from-metallb", file])
        .output()
        .unwrap()
}

#[test]
fn cli_prints_a_ferrolb_stream_and_one_stderr_line_per_unconverted_field() {
    let (path, _) = fixture("config.yaml");
    let out = run_cli(&path);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    // The output is for a cluster (passwordSecret, not passwordFile).
    let config = parse_stream("stdout", &stdout).unwrap().config().validate(Origin::Cluster).unwrap();
    assert_eq!((config.pools.len(), config.peers.len(), config.bfd_profiles.len()), (3, 4, 2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let c = converted("config.yaml");
    let mut expected: Vec<String> = c.unconverted.iter().map(|u| format!("not converted: {u}")).collect();
    expected.push(
        "not written: Secret ferrolb-system/router-a-bgp-password (BGPPeer router-a's password): rerun with \
         --secrets-file FILE and apply FILE first"
            .to_owned(),
    );
    expected.extend(c.commands.iter().map(|c| format!("run before applying: {c}")));
    assert_eq!(stderr.lines().collect::<Vec<_>>(), expected);
    assert!(!stdout.contains("hunter2") && !stderr.contains("hunter2"), "a password leaked");

    // Nothing to convert: a clear error and a non-zero exit.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("none.yaml");
    std::fs::write(&empty, "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n").unwrap();
    let out = run_cli(empty.to_str().unwrap());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to convert"));
}

/// MetalLB's documented examples convert into a configuration ferrolb's validator
/// accepts, and every Secret a BGPPeer names is one the speaker can read: in ferrolb's
/// namespace, and either emitted (with the password from the input) or created by a
/// printed command that copies it, with the speaker's Role extended to it.
#[test]
fn metallb_documented_samples_convert_and_every_password_secret_is_provided() {
    let c = converted("samples.yaml");
    assert!(c.invalid.is_empty(), "{:#?}", c.invalid);
    assert!(c.unconverted.is_empty(), "{:#?}", c.unconverted);
    let stream = parse_stream("converted", &c.to_yaml().unwrap()).unwrap();
    let config = stream.config().validate(Origin::Cluster).unwrap();
    assert_eq!(
        (config.pools.len(), config.l2_advertisements.len(), config.bgp_advertisements.len()),
        (1, 1, 2)
    );
    assert_eq!((config.peers.len(), config.bfd_profiles.len()), (4, 1));

    let Object::BgpAdvertisement(local) = find(&c, "BGPAdvertisement", "local") else { unreachable!() };
    assert_eq!(
        (local.spec.aggregation_length, local.spec.communities.as_slice()),
        (32, &["65535:65282".to_owned()][..])
    );
    let Object::BgpAdvertisement(ext) = find(&c, "BGPAdvertisement", "external") else { unreachable!() };
    assert_eq!((ext.spec.aggregation_length, ext.spec.aggregation_length_v6), (24, 124));

    let mut referenced = Vec::new();
    for peer in &config.peers {
        let Some(r) = &peer.spec.password_secret else { continue };
        assert_eq!((r.namespace.as_str(), r.key.as_str()), ("ferrolb-system", "password"), "{r:?}");
        let emitted = c.secrets.iter().any(|s| s.namespace == r.namespace && s.name == r.name);
        let copy = format!(
            "kubectl -n ferrolb-system create secret generic {} --from-file=password=/dev/stdin",
            r.name
        );
        let copied = c.commands.iter().any(|cmd| cmd.ends_with(&copy));
        assert!(emitted != copied, "Secret {} must be emitted or copied, once: {:#?}", r.name, c.commands);
        let grant = format!("\"value\":\"{}\"}}]'", r.name);
        assert!(
            c.commands
                .iter()
                .any(|cmd| cmd.contains("patch role ferrolb-speaker-bgp-passwords") && cmd.ends_with(&grant))
        );
        referenced.push(r.name.clone());
    }
    assert_eq!(referenced, ["example-inline-bgp-password", "secretname", "not-in-input"]);
    assert_eq!(
        c.commands.iter().filter(|cmd| cmd.contains("get secret")).collect::<Vec<_>>(),
        ["kubectl -n metallb-system get secret not-in-input -o jsonpath='{.data.password}' | base64 -d | \
          kubectl -n ferrolb-system create secret generic not-in-input --from-file=password=/dev/stdin"]
    );

    // The emitted Secrets hold the input's passwords, under the key the BGPPeers name.
    let secrets: Vec<k8s_openapi::api::core::v1::Secret> = c
        .secrets_yaml()
        .unwrap()
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect();
    let passwords: Vec<(String, String, Vec<u8>)> = secrets
        .into_iter()
        .map(|s| {
            let p = s.data.unwrap()["password"].0.clone();
            (s.metadata.namespace.unwrap(), s.metadata.name.unwrap(), p)
        })
        .collect();
    assert_eq!(
        passwords,
        [
            ("ferrolb-system".into(), "example-inline-bgp-password".into(), b"hunter2".to_vec()),
            ("ferrolb-system".into(), "secretname".into(), b"hunter3".to_vec()),
        ]
    );
    assert!(!format!("{c:?}").contains("hunter"), "Debug hides passwords");
}

/// The CLI prints no password: the Secrets go only to --secrets-file, readable by its
/// owner alone, and without it stderr says which Secrets were not written.
#[test]
fn cli_writes_passwords_only_to_the_secrets_file() {
    let (path, _) = fixture("samples.yaml");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secrets.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolb-controller"))
        .args(["migrate-from-metallb", &path, "--secrets-file", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (stdout, stderr) = (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap());
    assert!(!stdout.contains("hunter") && !stderr.contains("hunter"), "a password leaked");
    assert!(!stdout.contains("aHVudGVy") && !stderr.contains("aHVudGVy"), "a password leaked in base64");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), converted("samples.yaml").secrets_yaml().unwrap());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!stderr.contains("not written"), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("run before applying: kubectl -n metallb-system get secret not-in-input"))
    );

    let out = run_cli(&path);
    assert!(out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("hunter") && !String::from_utf8(out.stdout).unwrap().contains("hunter"));
    assert!(
        stderr.contains("not written: Secret ferrolb-system/secretname (BGPPeer example-secret's password)")
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Whatever a user feeds it, the converter answers instead of panicking.
    #[test]
    fn never_panics_on_damaged_input(at in 0usize..4000, len in 0usize..40, junk in "[ -~\n]{0,24}") {
        let (_, text) = fixture("config.yaml");
        let start = text.char_indices().map(|(i, _)| i).find(|&i| i >= at % text.len()).unwrap_or(0);
        let end = text.char_indices().map(|(i, _)| i).find(|&i| i >= start + len).unwrap_or(text.len());
        let damaged = format!("{}{junk}{}", &text[..start], &text[end..]);
        if let Ok(c) = convert(&damaged, "damaged.yaml") {
            c.to_yaml().unwrap();
        }
    }
}
