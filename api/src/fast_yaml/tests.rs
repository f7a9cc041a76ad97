use proptest::prelude::*;
use serde_json::{Value, json};

use super::parse;

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
        "a:\n b: 1\n  c: 2\n",
        "%YAML 1.2\n---\na: 1\n",
    ] {
        assert_eq!(parse(doc), None, "should be declined:\n{doc}");
    }
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
    ) {
        let mut doc = String::new();
        write_block(&mut doc, &Node::Map(entries), 0, step, compact, comment);
        assert_agrees(&doc);
    }

    #[test]
    fn agrees_on_any_text(doc in "[a-z0-9:#'\"\\-\\[\\]{}, \n.&*!|>~]{0,60}") {
        assert_agrees(&doc);
    }
}
