//! Object streams as users and checkpoints write them.

use ferrolb_api::{
    BgpPeer, Object, ServiceFields, StreamError, VipMode, parse_stream, parse_stream_services, read_stream,
    write_atomically, write_stream,
};

const STATIC_FILE: &str = r#"---
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata:
  name: public
spec:
  addresses: ["203.0.113.0/24", "198.51.100.10-198.51.100.20", "2001:db8:3::/120"]
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata:
  name: router-a
spec:
  myASN: 64513
  peerASN: 64512
  peerAddress: 192.0.2.1
  holdTime: 9s
  passwordFile: /etc/ferrolb/bgp-password
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPAdvertisement
metadata:
  name: public
spec:
  ipAddressPools: [public]
  communities: [64512:100, "large:64512:1:2", no-export]
---
apiVersion: v1
kind: Node
metadata:
  name: node1
  labels: {kubernetes.io/hostname: node1}
status:
  addresses:
  - {type: InternalIP, address: 192.0.2.11}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  type: LoadBalancer
  ports: [{port: 80, protocol: TCP}]
status:
  loadBalancer:
    ingress: [{ip: 203.0.113.1}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abcde
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
- addresses: [10.244.1.5]
  conditions: {ready: true, serving: true, terminating: false}
  nodeName: node1
ports: [{port: 8080, protocol: TCP}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: something-else
"#;

#[test]
fn reads_multi_document_stream_of_every_kind() {
    let s = parse_stream("static.yaml", STATIC_FILE).unwrap();
    let kinds: Vec<_> = s.objects.iter().map(|(_, o)| o.kind()).collect();
    assert_eq!(kinds, ["IPAddressPool", "BGPPeer", "BGPAdvertisement", "Node", "Service", "EndpointSlice"]);
    assert_eq!(s.objects[3].0.document, 4);
    let Object::BgpAdvertisement(adv) = &s.objects[2].1 else { panic!("not an advertisement") };
    // YAML 1.1 would read 64512:100 as a base-60 integer; it must stay a string.
    assert_eq!(adv.spec.communities[0], "64512:100");
    let Object::Service(svc) = &s.objects[4].1 else { panic!("not a service") };
    let ingress = svc.status.as_ref().unwrap().load_balancer.as_ref().unwrap();
    assert_eq!(ingress.ingress.as_ref().unwrap()[0].ip.as_deref(), Some("203.0.113.1"));
    assert!(s.validated_config("static.yaml").is_ok());
}

#[test]
fn unknown_kinds_are_ignored_with_a_warning() {
    let s = parse_stream("static.yaml", STATIC_FILE).unwrap();
    assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    let w = &s.warnings[0];
    assert!(w.contains("static.yaml"), "{w}");
    assert!(w.contains("document 7"), "{w}");
    assert!(w.contains("Deployment"), "{w}");
}

#[test]
fn reads_kind_list_as_kubectl_prints_it() {
    let text = r#"apiVersion: v1
items:
- apiVersion: ferrolb.io/v1alpha1
  kind: BFDProfile
  metadata:
    creationTimestamp: "2026-11-22T10:00:00Z"
    generation: 1
    name: fast
    resourceVersion: "1234"
    uid: 0b9f8c1e-0000-4000-8000-000000000001
  spec:
    detectMultiplier: 5
  status:
    conditions:
    - lastTransitionTime: "2026-11-22T10:00:01Z"
      message: configuration is valid
      reason: Valid
      status: "True"
      type: Valid
- apiVersion: ferrolb.io/v1alpha1
  kind: ControlPlaneVIP
  metadata:
    name: apiserver
  spec:
    address: 192.0.2.100
    mode: BGP
    bgp: {peers: [router-a]}
kind: List
metadata:
  resourceVersion: ""
"#;
    let s = parse_stream("list.yaml", text).unwrap();
    assert_eq!(s.objects.len(), 2);
    assert_eq!(s.objects[1].0.item, Some(1));
    let Object::BfdProfile(b) = &s.objects[0].1 else { panic!() };
    assert_eq!(b.spec.detect_multiplier, 5);
    assert_eq!(b.spec.transmit_interval, "300ms", "default applied");
    assert_eq!(b.status.as_ref().unwrap().conditions[0].type_, "Valid");
    let Object::ControlPlaneVip(v) = &s.objects[1].1 else { panic!() };
    assert_eq!(v.spec.mode, VipMode::Bgp);
}

#[test]
fn invalid_document_rejects_file_with_place_and_path() {
    let text = STATIC_FILE.replace("peerASN: 64512", "peerASN: lots");
    let err = parse_stream("static.yaml", &text).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StreamError::Object { .. }));
    assert!(msg.contains("static.yaml"), "{msg}");
    assert!(msg.contains("document 2"), "{msg}");
    assert!(msg.contains("spec.peerASN"), "{msg}");
}

#[test]
fn invalid_list_item_names_the_item() {
    let text = r#"apiVersion: v1
kind: List
items:
- apiVersion: ferrolb.io/v1alpha1
  kind: IPAddressPool
  metadata: {name: a}
  spec: {addresses: ["192.0.2.0/28"]}
- apiVersion: ferrolb.io/v1alpha1
  kind: IPAddressPool
  metadata: {name: b}
  spec: {addresses: "192.0.2.16/28"}
"#;
    let msg = parse_stream("list.yaml", text).unwrap_err().to_string();
    assert!(msg.contains("list.yaml: document 1, items[1]: spec.addresses:"), "{msg}");
}

#[test]
fn missing_kind_and_yaml_errors() {
    let msg = parse_stream("f.yaml", "apiVersion: v1\nmetadata: {name: x}\n").unwrap_err().to_string();
    assert!(msg.contains("f.yaml: document 1: kind: missing kind"), "{msg}");
    let err = parse_stream("f.yaml", "a: [1, 2\nb: c\n").unwrap_err();
    assert!(matches!(err, StreamError::Yaml { .. }), "{err}");
    assert!(err.to_string().starts_with("f.yaml: invalid YAML"), "{err}");
}

#[test]
fn secrets_never_appear_in_warnings_or_errors() {
    let secret = r#"apiVersion: v1
kind: Secret
metadata: {name: bgp-auth, namespace: ferrolb-system}
stringData:
  password: hunter2-very-secret
"#;
    let s = parse_stream("f.yaml", secret).unwrap();
    assert!(s.objects.is_empty());
    assert!(!s.warnings[0].contains("hunter2"), "{}", s.warnings[0]);

    let broken = format!("{secret}  other: [unclosed\n");
    let err = parse_stream("f.yaml", &broken).unwrap_err().to_string();
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn validation_errors_name_the_document() {
    let text = STATIC_FILE.replace("holdTime: 9s", "holdTime: 2s");
    let s = parse_stream("static.yaml", &text).unwrap();
    let err = s.validated_config("static.yaml").unwrap_err().to_string();
    assert!(err.contains("document 2: BGPPeer/router-a: spec.holdTime:"), "{err}");
}

#[test]
fn write_then_read_round_trips() {
    let s = parse_stream("static.yaml", STATIC_FILE).unwrap();
    let objects: Vec<Object> = s.objects.iter().map(|(_, o)| o.clone()).collect();
    let text = write_stream(&objects).unwrap();
    let again = parse_stream("checkpoint.yaml", &text).unwrap();
    let objects_again: Vec<Object> = again.objects.into_iter().map(|(_, o)| o).collect();
    assert_eq!(objects, objects_again, "{text}");
    assert!(again.warnings.is_empty());
}

#[test]
fn strings_that_look_like_other_yaml_types_survive() {
    let mut peer: BgpPeer = match &parse_stream("s", STATIC_FILE).unwrap().objects[1].1 {
        Object::BgpPeer(p) => (**p).clone(),
        _ => panic!(),
    };
    for tricky in ["no", "yes", "on", "1:30", "0x10", "1e3", "null", "~", "012", "3.10"] {
        peer.spec.password_file = Some(tricky.into());
        peer.spec.router_id = Some(tricky.into());
        let text = write_stream([&Object::from(peer.clone())]).unwrap();
        let back = parse_stream("s", &text).unwrap();
        assert_eq!(back.objects[0].1, Object::from(peer.clone()), "{text}");
    }
}

#[test]
fn atomic_write_keeps_previous() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.yaml");
    write_atomically(&path, b"one", true).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"one");
    assert!(!dir.path().join("checkpoint.yaml.prev").exists());
    write_atomically(&path, b"two", true).unwrap();
    write_atomically(&path, b"three", true).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"three");
    assert_eq!(std::fs::read(dir.path().join("checkpoint.yaml.prev")).unwrap(), b"two");
    write_atomically(&path, b"four", false).unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("checkpoint.yaml.prev")).unwrap(),
        b"two",
        "without keep_previous the .prev file is left alone"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "no temp files left: {names:?}");
    let s = read_stream(&path);
    assert!(matches!(s, Err(StreamError::Yaml { .. }) | Err(StreamError::Object { .. })));
    let missing = read_stream(&dir.path().join("nope.yaml")).unwrap_err();
    assert!(missing.to_string().contains("nope.yaml"));
}

#[test]
fn empty_documents_keep_document_numbers() {
    let s = parse_stream(
        "e.yaml",
        "---\n---\napiVersion: v1\nkind: Foo\n---\n\n---\napiVersion: v1\nkind: Bar\n",
    )
    .unwrap();
    assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
    assert!(s.warnings[0].contains("document 2"), "{:?}", s.warnings);
    assert!(s.warnings[1].contains("document 4"), "{:?}", s.warnings);
}

#[test]
fn yaml_errors_give_document_and_file_line() {
    let text = "apiVersion: v1\nkind: Foo\n---\napiVersion: v1\nkind: [Bar\n";
    let err = parse_stream("f.yaml", text).unwrap_err().to_string();
    assert!(err.starts_with("f.yaml: invalid YAML: document 2: line 5, column"), "{err}");
}

#[test]
fn separator_with_content_and_document_end_markers() {
    let text = "--- {apiVersion: v1, kind: Foo}\n...\n--- \napiVersion: v1\nkind: Bar\n";
    let s = parse_stream("f.yaml", text).unwrap();
    assert_eq!(s.warnings.len(), 2, "{:?}", s.warnings);
    assert!(s.warnings[1].contains("document 2"), "{:?}", s.warnings);
}

#[test]
fn checkpoint_write_and_read_back() {
    let text = format!(
        "{STATIC_FILE}---\n{}",
        r#"apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata: {name: apiserver}
spec:
  address: 192.0.2.100
  mode: BGP
  bgp: {peers: [router-a]}
"#
    );
    let s = parse_stream("static.yaml", &text).unwrap();
    let config = s.validated_config("static.yaml").unwrap();
    let checkpoint = config.for_control_plane_vip("apiserver").unwrap();
    let bytes = write_stream(&checkpoint.to_objects()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.yaml");
    write_atomically(&path, bytes.as_bytes(), true).unwrap();
    let back = read_stream(&path).unwrap();
    let kinds: Vec<_> = back.objects.iter().map(|(_, o)| o.kind()).collect();
    assert_eq!(kinds, ["ControlPlaneVIP", "BGPPeer"]);
    let valid = back.validated_config("checkpoint.yaml").unwrap();
    assert_eq!(valid.into_inner(), checkpoint);
}

#[test]
fn misspelt_ferrolb_field_rejects_the_file() {
    let text = STATIC_FILE.replace("holdTime: 9s", "holdtime: 9s");
    let err = parse_stream("static.yaml", &text).unwrap_err().to_string();
    assert!(
        err.contains("static.yaml: document 2: spec.holdtime: unknown field in BGPPeer \"router-a\""),
        "{err}"
    );
    let text = STATIC_FILE.replace("  - {type: InternalIP", "  - {typo: 1, type: InternalIP");
    let s = parse_stream("static.yaml", &text).unwrap();
    assert!(
        s.warnings.iter().any(|w| w.contains("document 4")
            && w.contains("Node \"node1\": ignoring unknown fields status.addresses")),
        "{:?}",
        s.warnings
    );
}

/// `n` documents: Services, with an ignored kind at every tenth and, at each place
/// in `broken`, a document that is not valid YAML.
fn big_stream(n: usize, broken: &[usize]) -> String {
    (1..=n)
        .map(|d| {
            if broken.contains(&d) {
                format!("apiVersion: v1\nkind: [Broken{d}\n")
            } else if d % 10 == 0 {
                format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{d}}}\n")
            } else {
                format!(
                    "apiVersion: v1\nkind: Service\nmetadata: {{name: s{d}, namespace: default}}\nspec: {{type: LoadBalancer}}\n"
                )
            }
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[test]
fn a_large_stream_reads_in_file_order_with_every_document_numbered() {
    // Far above the size from which the stream is parsed on several threads.
    let n = 5_000;
    let s = parse_stream("big.yaml", &big_stream(n, &[])).unwrap();
    let names: Vec<String> = s.objects.iter().map(|(_, o)| o.name()).collect();
    let want: Vec<String> = (1..=n).filter(|d| d % 10 != 0).map(|d| format!("s{d}")).collect();
    assert_eq!(names, want);
    assert!(s.objects.iter().all(|(src, o)| o.name() == format!("s{}", src.document)));
    assert_eq!(s.warnings.len(), n / 10);
    for (k, w) in s.warnings.iter().enumerate() {
        let d = (k + 1) * 10;
        assert!(w.starts_with(&format!("big.yaml: document {d}: ignoring v1 ConfigMap \"cm-{d}\"")), "{w}");
    }
}

#[test]
fn a_large_stream_is_rejected_on_its_first_bad_document_in_file_order() {
    let n = 5_000;
    // One error late in the file, one early (each in a run of its own): the earlier is the one reported,
    // with its line counted from the start of the file.
    let text = big_stream(n, &[4_900, 1_200]);
    let err = parse_stream("big.yaml", &text).unwrap_err().to_string();
    let line = text[..text.find("kind: [Broken1200").unwrap()].matches('\n').count() + 1;
    assert!(err.starts_with(&format!("big.yaml: invalid YAML: document 1200: line {line}, column")), "{err}");
    let err = parse_stream("big.yaml", &big_stream(n, &[4_999])).unwrap_err().to_string();
    assert!(err.contains("document 4999"), "{err}");
}

/// Services in every shape a file holds them: read straight (flow and block style), and
/// through the object (a List item, a field the fast reader leaves to the decoder, an
/// unknown field, which only warns), beside objects of other kinds.
fn services_of_every_shape(n: usize) -> String {
    let mut docs = vec![STATIC_FILE.trim_start_matches("---\n").to_owned()];
    for d in 0..n {
        docs.push(match d % 5 {
            0 => format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: s{d}, namespace: ns, labels: {{app: a{d}}}}}\nspec: {{type: LoadBalancer, selector: {{app: a{d}}}, externalTrafficPolicy: Local}}\nstatus: {{loadBalancer: {{ingress: [{{ip: 198.18.0.{}}}, {{hostname: h}}]}}}}\n",
                d % 250
            ),
            1 => format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: s{d}\n  creationTimestamp: \"2026-11-26T01:00:00Z\"\nspec:\n  type: ClusterIP\n  ports:\n  - port: 80\n    targetPort: http\n"
            ),
            2 => format!(
                "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata: {{name: s{d}}}\n  spec: {{type: LoadBalancer, loadBalancerClass: other}}\n"
            ),
            3 => format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: s{d}\n  managedFields: [{{manager: kubectl}}]\nspec: {{type: LoadBalancer}}\nstatus: {{loadBalancer: {{ingress: [{{ip: \"2001:db8::{d:x}\"}}]}}}}\n"
            ),
            _ => format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: s{d}\n  annotations:\n    note: |\n      two\n      lines\nspec: {{type: LoadBalancer, typo: 1}}\n"
            ),
        });
    }
    docs.join("---\n")
}

#[test]
fn services_are_taken_as_their_objects_read() {
    // A few documents (one thread) and many (several threads).
    for n in [10, 3_000] {
        let text = services_of_every_shape(n);
        let objects = parse_stream("s.yaml", &text).unwrap();
        let (rest, taken) = parse_stream_services("s.yaml", &text, |f| f.into_owned()).unwrap();
        let (services, others): (Vec<_>, Vec<_>) =
            objects.objects.into_iter().partition(|(_, o)| matches!(o, Object::Service(_)));
        let want: Vec<_> = services
            .into_iter()
            .map(|(src, o)| match o {
                Object::Service(s) => (src, ServiceFields::from(*s)),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(taken.len(), n + 1);
        assert_eq!(taken, want);
        assert_eq!(rest.objects, others, "every other object stays in the stream");
        assert_eq!(rest.warnings, objects.warnings);
        assert_eq!(
            rest.warnings.iter().filter(|w| w.contains("ignoring unknown fields spec.typo")).count(),
            n / 5
        );
        let local = &taken[1].1;
        assert_eq!(local.external_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(local.ingress, ["198.18.0.0".parse::<std::net::IpAddr>().unwrap()]);
    }
    // An invalid Service still rejects the whole stream, as the object's decoder words it.
    let text = services_of_every_shape(10).replace("targetPort: http", "targetPort: [http]");
    let err = parse_stream_services("s.yaml", &text, |_| ()).unwrap_err().to_string();
    assert_eq!(err, parse_stream("s.yaml", &text).unwrap_err().to_string());
    assert!(err.contains("spec.ports[0].targetPort"), "{err}");
}

/// The documents of `text` the slow, obvious way: line by line (the reference
/// `split_documents` must agree with, whatever search it uses).
fn split_by_lines(text: &str) -> Vec<(usize, &str)> {
    let blank = |c: &str| c.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
    let (mut docs, mut start, mut start_line, mut offset, mut seen) = (Vec::new(), 0, 1, 0, false);
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare.strip_prefix("---").is_some_and(|r| r.is_empty() || r.starts_with(' ') || r.starts_with('\t'))
        {
            let chunk = &text[start..offset];
            if seen || !blank(chunk) {
                docs.push((start_line, chunk));
            }
            seen = true;
            start = offset + 3;
            start_line = n + 1;
        }
        offset += line.len();
    }
    if !blank(&text[start..]) {
        docs.push((start_line, &text[start..]));
    }
    docs
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]

    #[test]
    fn splits_documents_as_reading_line_by_line(
        lines in proptest::collection::vec(
            proptest::sample::select(vec![
                "---", "--- ", "---\r", "--- a: 1", "----", "---a", " ---", "a: 1", "# c", "", "\r", "-- -",
                "...", "b: ---", "---\t", "---\r\r",
            ]),
            0..12,
        ),
        newline_at_end: bool,
    ) {
        let mut text = lines.join("\n");
        if newline_at_end {
            text.push('\n');
        }
        proptest::prop_assert_eq!(ferrolb_api::split_documents(&text), split_by_lines(&text));
    }
}
