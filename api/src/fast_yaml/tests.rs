use proptest::prelude::*;
use serde_json::{Value, json};

use super::{key_cmp, parse, parse_node};

/// What the general parser makes of `doc`.
fn general(doc: &str) -> Result<Value, String> {
    serde_saphyr::from_str::<Value>(doc).map_err(|e| e.to_string())
}

/// The fast reader either declines or says exactly what the general parser says.
fn assert_agrees(doc: &str) {
    if let Some(fast) = parse(doc) {
        match general(doc) {
            Ok(v) => assert_eq!(fast, v, "the fast reader disagrees on:\n{doc}"),
            Err(e) => panic!("the fast reader accepted a document the general parser rejects ({e}):\n{doc}"),
        }
    }
}

const KUBECTL_SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  annotations:
    ferrolb.io/loadBalancerIPs: 198.18.0.7,2001:db8::7
    kubectl.kubernetes.io/last-applied-configuration: |
      {"apiVersion":"v1"}
  creationTimestamp: "2026-11-26T01:00:00Z"
  name: web # the front end
  namespace: default
  resourceVersion: "1007"
  uid: 5b0e6a4c-0000-4000-8000-000000000007
spec:
  clusterIP: 198.19.0.7
  clusterIPs:
  - 198.19.0.7
  ipFamilies:
  - IPv4
  ports:
  - name: http
    port: 80
    protocol: TCP
    targetPort: 8080
  selector:
    app: web
  type: LoadBalancer
status:
  loadBalancer:
    ingress:
    - ip: 198.18.0.7
      ipMode: VIP
"#;

#[test]
fn reads_what_kubectl_prints_without_the_block_scalar() {
    // The last-applied annotation is a block scalar: the general parser's job.
    assert_eq!(parse(KUBECTL_SERVICE), None);
    let doc = KUBECTL_SERVICE.replace(
        "    kubectl.kubernetes.io/last-applied-configuration: |\n      {\"apiVersion\":\"v1\"}\n",
        "    kubectl.kubernetes.io/last-applied-configuration: '{\"apiVersion\":\"v1\"}'\n",
    );
    let fast = parse(&doc).expect("kubectl's plain output is in the subset");
    assert_eq!(fast, general(&doc).unwrap());
    assert_eq!(fast["spec"]["ports"][0]["port"], json!(80));
    assert_eq!(fast["metadata"]["name"], json!("web"));
    assert_eq!(
        fast["metadata"]["annotations"]["ferrolb.io/loadBalancerIPs"],
        json!("198.18.0.7,2001:db8::7")
    );
    assert_eq!(fast["status"]["loadBalancer"]["ingress"][0], json!({"ip": "198.18.0.7", "ipMode": "VIP"}));
}

#[test]
fn reads_one_line_flow_collections() {
    let doc = "apiVersion: v1\nkind: Service\nmetadata: {name: bulk-1, namespace: default}\n\
               spec: {type: LoadBalancer, ports: [{port: 80, protocol: TCP}]}\n\
               status: {loadBalancer: {ingress: [{ip: \"198.18.0.1\"}]}}\n";
    let fast = parse(doc).expect("flow collections on one line are in the subset");
    assert_eq!(fast, general(doc).unwrap());
    assert_eq!(fast["spec"]["ports"], json!([{"port": 80, "protocol": "TCP"}]));
}

#[test]
fn leaves_everything_outside_the_subset_to_the_general_parser() {
    for doc in [
        "a: &x 1\nb: *x\n",
        "a: !!str 5\n",
        "a: |\n  text\n",
        "a: >\n  text\n",
        "a: one\n  two\n",
        "? a\n: b\n",
        "a: 1\na: 2\n",
        "a: yes\n",
        "a: Yes\n",
        "a: 1e3\n",
        "a: 0x1F\n",
        "a: 0o17\n",
        "a: 1_000\n",
        "a: 12:30\n",
        "a: .inf\n",
        "a: -0\n",
        "a: 007\n",
        "a: 2026-11-26\n",
        "a: \"\\x41\"\n",
        "a:\tb\n",
        "\u{feff}a: b\n",
        "<<: {a: 1}\n",
        "80: http\n",
        "- a\n- b\n",
        "just a scalar\n",
        "a: [1,\n  2]\n",
        "a: b: c\n",
        "a: 'unterminated\n",
        "a: {b: 1} trailing\n",
        // A comment not set off by a space is an error (found by `agrees_on_any_text`).
        "a: 'b'#c\n",
        "a: \"b\"#c\n",
        "a: [b]#c\n",
        "--&0''!6']yu:*: 'y>8#,4*[>'#>[,*,{w.",
        "a:\n b: 1\n  c: 2\n",
        "%YAML 1.2\n---\na: 1\n",
    ] {
        assert_eq!(parse(doc), None, "should be declined:\n{doc}");
    }
    // Set off by a space, it is a comment.
    for doc in ["a: 'b' #c\n", "a: [b] #c\n"] {
        assert!(parse(doc).is_some(), "should be read:\n{doc}");
        assert_agrees(doc);
    }
}

/// YAML 1.2 (§5.4) reads CR, LF and CR LF alike as line breaks: a lone CR must not be
/// read as a character inside a line (an old-Mac or mangled file).
#[test]
fn reads_a_lone_carriage_return_as_the_general_parser_does() {
    for doc in [
        "a: b\rc: d\n",
        "a: b\r  c\n",
        "a: b\rc\n",
        "a: 'x\ry'\n",
        "a: \"x\ry\"\n",
        "a:\r  b: c\n",
        "a: [x,\r y]\n",
        "a: b\r",
        "a: b\r\r\nc: d\r\n",
        "a: b # c\rd: e\n",
    ] {
        assert_agrees(doc);
    }
    // CR LF is one line break: still read.
    assert_eq!(parse("a: b\r\nc: d\r\n"), Some(json!({"a": "b", "c": "d"})));
}

#[test]
fn agrees_on_every_yaml_file_in_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut read = 0;
    let mut files = vec![root.join("manifests"), root.join("api"), root.join("testbed")];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            if path.ends_with("target") {
                continue;
            }
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (_, doc) in crate::stream::split_documents(&text) {
                if parse(doc).is_some() {
                    read += 1;
                }
                assert_agrees(doc);
            }
        }
    }
    assert!(read > 20, "the fast reader read only {read} documents of the repository's YAML");
}

/// Scalars in plain, quoted and odd spellings: mostly ones the fast reader reads, and
/// some that a YAML schema reads as something other than a string, or that are errors.
fn scalar() -> impl Strategy<Value = String> {
    let usual = prop::sample::select(vec![
        "a",
        "web",
        "LoadBalancer",
        "v1",
        "80",
        "0",
        "-5",
        "123456789012345678",
        "192.0.2.1",
        "2001:db8::1",
        "198.18.0.0/15",
        "2001:db8::/64",
        "90s",
        "1m30s",
        "3d",
        "7f",
        "a # c",
        "a#b",
        "-a",
        "'it''s'",
        "'a b'",
        "\"esc\\n\\u00e9\"",
        "\"a\\\"b\"",
        "\"\"",
        "''",
        "[a, b]",
        "[]",
        "{}",
        "{a: 1}",
        "{a: [1, {b: c}]}",
        "[a, [b]]",
        "http://x/y",
        "a, b",
        "é",
        "ferrolb.io/pool",
        "5b0e6a4c-0000-4000-8000-000000000007",
        "true",
        "false",
        "null",
        "~",
        "x   ",
    ]);
    let odd = prop::sample::select(vec![
        "-0",
        "+5",
        "007",
        "1e3",
        "1.5",
        ".5",
        "0x1F",
        "0o17",
        "1_000",
        "12:30",
        ".inf",
        "-.inf",
        ".NaN",
        "nan",
        "inf",
        "yes",
        "Yes",
        "NO",
        "on",
        "Off",
        "y",
        "n",
        "Infinity",
        "infinite",
        "yesterday",
        "Null",
        "NULL",
        "True",
        "FALSE",
        "2026-11-26",
        "2026-11-26T01:00:00Z",
        "a: b",
        "- x",
        "-",
        "&a x",
        "*a",
        "!!str 5",
        "|",
        ">",
        "\"\\x41\"",
        "{a: b, a: c}",
        "{a:b}",
        "[a,]",
        "a\u{85}b",
        "=",
        "<<",
        "?a",
        ":a",
        "@a",
        "`a",
        "%a",
        "\"unterminated",
        "9999999999999999999",
        "1234e678-0000",
        "0b101",
        "0X1F",
        "+.5",
        "1.2.3.4.5",
    ]);
    prop_oneof![12 => usual, 1 => odd].prop_map(str::to_owned)
}

fn key() -> impl Strategy<Value = String> {
    let usual = prop::sample::select(vec![
        "a",
        "b",
        "name",
        "ferrolb.io/x",
        "spec",
        "a b",
        "\"q\"",
        "'s'",
        "\"a: b\"",
        "-k",
        "k#",
        "é",
    ]);
    let odd = prop::sample::select(vec!["80", "on", "y", "true", "null", "<<", "k #c", "?k", "[k]", "{k}"]);
    prop_oneof![12 => usual, 1 => odd].prop_map(str::to_owned)
}

/// A YAML node written in block style at `indent`, as lines.
#[derive(Clone, Debug)]
enum Node {
    Scalar(String),
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
}

fn node() -> impl Strategy<Value = Node> {
    let leaf = scalar().prop_map(Node::Scalar);
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec((key(), inner.clone()), 0..4).prop_map(Node::Map),
            prop::collection::vec(inner, 0..4).prop_map(Node::Seq),
        ]
    })
}

/// Writes `node` as the value after a key or dash: inline scalars on the line, blocks
/// on the following lines at `indent` (+ `step`), sequences under a key at the key's own
/// indentation when `compact`.
fn write_value(out: &mut String, node: &Node, indent: usize, step: usize, compact: bool, comment: bool) {
    match node {
        Node::Scalar(s) => {
            out.push(' ');
            out.push_str(s);
            if comment {
                out.push_str(" # note");
            }
            out.push('\n');
        }
        Node::Map(entries) if entries.is_empty() => out.push_str(" {}\n"),
        Node::Seq(items) if items.is_empty() => out.push_str(" []\n"),
        Node::Map(_) => {
            out.push('\n');
            write_block(out, node, indent + step, step, compact, comment);
        }
        Node::Seq(_) => {
            out.push('\n');
            write_block(out, node, if compact { indent } else { indent + step }, step, compact, comment);
        }
    }
}

fn write_block(out: &mut String, node: &Node, indent: usize, step: usize, compact: bool, comment: bool) {
    let pad = " ".repeat(indent);
    match node {
        Node::Scalar(s) => {
            out.push_str(&pad);
            out.push_str(s);
            out.push('\n');
        }
        Node::Map(entries) => {
            for (k, v) in entries {
                out.push_str(&pad);
                out.push_str(k);
                out.push(':');
                write_value(out, v, indent, step, compact, comment);
            }
        }
        Node::Seq(items) => {
            for item in items {
                out.push_str(&pad);
                out.push('-');
                match item {
                    Node::Map(entries) if !entries.is_empty() => {
                        // `- key: value`, the rest of the mapping aligned under the key.
                        let mut inner = String::new();
                        write_block(&mut inner, item, indent + 2, step, compact, comment);
                        out.push(' ');
                        out.push_str(&inner[indent + 2..]);
                    }
                    _ => write_value(out, item, indent, step, false, comment),
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn agrees_with_the_general_parser(
        entries in prop::collection::vec((key(), node()), 1..5),
        step in prop::sample::select(vec![2usize, 4]),
        compact: bool,
        comment: bool,
        line_break in prop::sample::select(vec!["\n", "\r\n", "\r"]),
    ) {
        let mut doc = String::new();
        write_block(&mut doc, &Node::Map(entries), 0, step, compact, comment);
        // The scalars hold no line break (only escaped ones), so every `\n` is one.
        assert_agrees(&doc.replace('\n', line_break));
    }

    /// Keys are sorted, searched and checked for duplicates with `key_cmp`: it must
    /// order as `str::cmp` does, or a lookup misses a key the object's decoder finds.
    #[test]
    fn compares_keys_as_strings_do(a in "[a-cé]{0,4}", b in "[a-cé]{0,4}") {
        prop_assert_eq!(key_cmp(&a, &b), a.cmp(&b));
        prop_assert_eq!(key_cmp(&a, &a), std::cmp::Ordering::Equal);
    }

    #[test]
    fn agrees_on_any_text(doc in "[a-z0-9:#'\"\\-\\[\\]{}, \n\r.&*!|>~]{0,60}") {
        assert_agrees(&doc);
    }
}

/// What the general path makes of `doc`: the objects it emits and its warnings.
fn general_objects(doc: &str) -> (Vec<crate::stream::Object>, Vec<String>) {
    let value = parse_node(doc).expect("read by the fast reader").into_value();
    let source = crate::stream::Source { document: 1, item: None };
    let (mut objects, mut warnings) = (Vec::new(), Vec::new());
    let result = crate::stream::decode_into("f", source, value, &mut warnings, &mut |_, o| objects.push(o));
    if let Err(e) = result {
        warnings.push(e.to_string());
    }
    (objects, warnings)
}

/// An object decoded straight from the fast reader's node is the very object the
/// general path (through a `Value`) decodes, with no warning and no error there.
fn assert_decodes_alike(doc: &str) -> bool {
    let Some(node) = parse_node(doc) else { return false };
    let Some(fast) = crate::stream::decode_fast(&node) else { return false };
    let (objects, warnings) = general_objects(doc);
    assert_eq!(
        warnings,
        Vec::<String>::new(),
        "decoded straight, but the general path warns or fails on:\n{doc}"
    );
    assert_eq!(objects, vec![fast], "decoded straight into another object than the general path's:\n{doc}");
    true
}

/// What a load balancer reads of a Service, read straight from the fast reader's node,
/// is what it reads of the object the general path decodes, with no warning and no
/// error there.
fn assert_fields_alike(doc: &str) -> bool {
    let Some(node) = parse_node(doc) else { return false };
    let Some(fast) = crate::service_fields::from_node(&node) else { return false };
    let (objects, warnings) = general_objects(doc);
    assert_eq!(
        warnings,
        Vec::<String>::new(),
        "read straight, but the general path warns or fails on:\n{doc}"
    );
    let [crate::stream::Object::Service(svc)] = <[_; 1]>::try_from(objects).expect("one object") else {
        panic!("read straight as a Service, decoded as another kind:\n{doc}");
    };
    assert_eq!(
        crate::ServiceFields::from(*svc),
        fast,
        "read straight otherwise than the general path:\n{doc}"
    );
    true
}

#[test]
fn reads_what_kubectl_prints_straight_into_service_fields() {
    let doc = KUBECTL_SERVICE.replace(
        "    kubectl.kubernetes.io/last-applied-configuration: |\n      {\"apiVersion\":\"v1\"}\n",
        "    kubectl.kubernetes.io/last-applied-configuration: '{\"apiVersion\":\"v1\"}'\n",
    );
    assert!(assert_fields_alike(&doc), "a plain kubectl Service must skip the object");
}

#[test]
fn decodes_what_kubectl_prints_straight_into_the_object() {
    let doc = KUBECTL_SERVICE.replace(
        "    kubectl.kubernetes.io/last-applied-configuration: |\n      {\"apiVersion\":\"v1\"}\n",
        "    kubectl.kubernetes.io/last-applied-configuration: '{\"apiVersion\":\"v1\"}'\n",
    );
    assert!(assert_decodes_alike(&doc), "a plain kubectl Service must skip the Value");
    // An unknown field, a misspelt ferrolb field or a type error go the general way,
    // which words the warning or the error.
    let typo = doc.replace("  type: LoadBalancer\n", "  type: LoadBalancer\n  typo: 1\n");
    assert!(parse_node(&typo).is_some() && crate::stream::decode_fast(&parse_node(&typo).unwrap()).is_none());
    let wrong = doc.replace("    port: 80\n", "    port: [80]\n");
    assert!(crate::stream::decode_fast(&parse_node(&wrong).unwrap()).is_none());
    let pool = "apiVersion: ferrolb.io/v1alpha1\nkind: IPAddressPool\nmetadata: {name: p}\nspec:\n  adresses: [192.0.2.0/24]\n";
    assert!(crate::stream::decode_fast(&parse_node(pool).unwrap()).is_none());
    assert!(assert_decodes_alike(&pool.replace("adresses", "addresses")));
}

#[test]
fn decodes_alike_every_object_of_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut straight = 0;
    let mut files =
        vec![root.join("manifests"), root.join("api"), root.join("testbed"), root.join("speaker")];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            if !path.ends_with("target") {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            }
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (_, doc) in crate::stream::split_documents(&text) {
                straight += usize::from(assert_decodes_alike(doc));
            }
        }
    }
    assert!(straight > 5, "only {straight} objects of the repository decoded straight");
}

/// A field's value: mostly of its type in the spellings given, now and then anything
/// (a generated scalar or block, often of the wrong type).
fn typed(spellings: &[&'static str]) -> BoxedStrategy<Node> {
    let own = prop::sample::select(spellings.to_vec()).prop_map(|s| Node::Scalar(s.to_owned()));
    prop_oneof![
        30 => own,
        1 => scalar().prop_map(Node::Scalar),
        1 => node(),
    ]
    .boxed()
}

fn string() -> BoxedStrategy<Node> {
    typed(&[
        "web",
        "TCP",
        "IPv4",
        "Local",
        "VIP",
        "'a b'",
        "\"esc\\n\\u00e9\"",
        "192.0.2.1",
        "\"8080\"",
        "''",
        "é",
    ])
}

fn int() -> BoxedStrategy<Node> {
    typed(&["80", "0", "-1", "65535", "65536", "4294967296", "10800", "123456789012345678"])
}

fn boolean() -> BoxedStrategy<Node> {
    typed(&["true", "false"])
}

fn time() -> BoxedStrategy<Node> {
    typed(&[
        "\"2026-11-26T01:00:00Z\"",
        "\"2026-11-26T01:00:00.5+01:00\"",
        "'2026-11-26T01:00:00Z'",
        "\"not a time\"",
    ])
}

fn int_or_string() -> BoxedStrategy<Node> {
    prop_oneof![int(), string()].boxed()
}

/// A mapping holding each of `fields` or not.
fn fields(fields: Vec<(&'static str, BoxedStrategy<Node>)>) -> BoxedStrategy<Node> {
    let entries: Vec<BoxedStrategy<Option<(String, Node)>>> = fields
        .into_iter()
        .map(|(k, v)| proptest::option::of(v.prop_map(move |v| (k.to_owned(), v))).boxed())
        .collect();
    entries.prop_map(|e| Node::Map(e.into_iter().flatten().collect())).boxed()
}

fn seq(item: BoxedStrategy<Node>) -> BoxedStrategy<Node> {
    prop::collection::vec(item, 0..3).prop_map(Node::Seq).boxed()
}

/// Service documents with any of their fields, now and then of another type.
fn service_doc() -> BoxedStrategy<Node> {
    let v = string;
    let metadata = fields(vec![
        ("name", v()),
        ("namespace", v()),
        ("uid", v()),
        ("resourceVersion", v()),
        ("generation", int()),
        ("creationTimestamp", time()),
        ("deletionTimestamp", time()),
        ("labels", fields(vec![("app", v()), ("tier", v())])),
        (
            "annotations",
            fields(vec![("ferrolb.io/loadBalancerIPs", v()), ("metallb.universe.tf/address-pool", v())]),
        ),
        ("finalizers", seq(v())),
    ]);
    let port = fields(vec![
        ("name", v()),
        ("port", int()),
        ("targetPort", int_or_string()),
        ("protocol", v()),
        ("nodePort", int()),
        ("appProtocol", v()),
    ]);
    let spec = fields(vec![
        ("type", v()),
        ("ports", seq(port)),
        ("clusterIP", v()),
        ("clusterIPs", seq(v())),
        ("ipFamilies", seq(v())),
        ("ipFamilyPolicy", v()),
        ("externalTrafficPolicy", v()),
        ("loadBalancerClass", v()),
        ("loadBalancerIP", v()),
        ("allocateLoadBalancerNodePorts", boolean()),
        ("publishNotReadyAddresses", boolean()),
        ("selector", fields(vec![("app", v())])),
        ("sessionAffinityConfig", fields(vec![("clientIP", fields(vec![("timeoutSeconds", int())]))])),
    ]);
    let ingress = fields(vec![
        ("ip", v()),
        ("hostname", v()),
        ("ipMode", v()),
        ("ports", seq(fields(vec![("port", int()), ("protocol", v()), ("error", v())]))),
    ]);
    let condition = fields(vec![
        ("type", v()),
        ("status", v()),
        ("lastTransitionTime", time()),
        ("observedGeneration", int()),
        ("reason", v()),
        ("message", v()),
    ]);
    let status = fields(vec![
        ("loadBalancer", fields(vec![("ingress", seq(ingress))])),
        ("conditions", seq(condition)),
    ]);
    (metadata, spec, status)
        .prop_map(|(m, sp, st)| {
            Node::Map(vec![
                ("apiVersion".into(), Node::Scalar("v1".into())),
                ("kind".into(), Node::Scalar("Service".into())),
                ("metadata".into(), m),
                ("spec".into(), sp),
                ("status".into(), st),
            ])
        })
        .boxed()
}

#[test]
fn decodes_services_as_the_general_path_does() {
    use std::cell::Cell;
    let straight = Cell::new(0u32);
    let fields = Cell::new(0u32);
    let config = ProptestConfig { cases: 3000, ..ProptestConfig::default() };
    let strategy = (service_doc(), prop::sample::select(vec![2usize, 4]), any::<bool>());
    proptest::test_runner::TestRunner::new(config)
        .run(&strategy, |(doc, step, compact)| {
            let mut text = String::new();
            write_block(&mut text, &doc, 0, step, compact, false);
            straight.set(straight.get() + u32::from(assert_decodes_alike(&text)));
            fields.set(fields.get() + u32::from(assert_fields_alike(&text)));
            Ok(())
        })
        .unwrap();
    // Not only the trivial cases: many generated Services take the fast path.
    assert!(straight.get() > 300, "only {} of 3000 generated Services decoded straight", straight.get());
    assert!(fields.get() > 150, "only {} of 3000 generated Services read straight", fields.get());
}
