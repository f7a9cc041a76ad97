//! The validation the apiserver enforces at `kubectl apply`: OpenAPI patterns, bounds and
//! CEL rules (`x-kubernetes-validations`) added to the generated schemas.
//!
//! [`crate::validate`] stays the authority; these rules repeat, for single objects, the
//! checks that need no other object, so a typo fails at apply instead of turning up later
//! as `Valid=False`. `testbed/tests/real_schema.rs` proves both agree on a corpus.
//! Every rule avoids the CEL IP/CIDR libraries: Kubernetes 1.29 and 1.30 lack them.

use serde_json::{Value, json};

use crate::duration::DURATION_MAX_LEN;

/// Go `time.ParseDuration` syntax without sign or spaces, exactly what [`crate::duration::Duration`] parses.
pub const DURATION_PATTERN: &str = r"^\+?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";

/// Pattern of an unsigned decimal at most `max`, as Rust's `str::parse` accepts it
/// (optional `+`, leading zeros allowed).
pub fn uint_pattern(max: u64) -> String {
    format!(r"\+?0*{}", decimal_at_most(max))
}

/// Decimal without sign or leading zeros, at most `max`.
fn decimal_at_most(max: u64) -> String {
    let digits: Vec<u32> = max.to_string().chars().filter_map(|c| c.to_digit(10)).collect();
    let n = digits.len();
    let mut alts = Vec::new();
    if n > 1 {
        alts.push(format!("[0-9]{{1,{}}}", n - 1));
    }
    // Same length as max: a prefix equal to max's, then a smaller digit, then anything.
    for i in 0..n {
        let prefix: String = digits[..i].iter().map(|d| d.to_string()).collect();
        let low = if i == 0 && n > 1 { 1 } else { 0 };
        if digits[i] > low {
            let rest = n - i - 1;
            let class = format!("[{low}-{}]", digits[i] - 1);
            let tail = if rest == 0 { String::new() } else { format!("[0-9]{{{rest}}}") };
            alts.push(format!("{prefix}{class}{tail}"));
        }
    }
    alts.push(max.to_string());
    format!("({})", alts.join("|"))
}

/// IPv4 dotted quad as Rust parses it (no leading zeros).
pub fn ipv4_pattern() -> String {
    let octet = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    format!(r"{octet}(\.{octet}){{3}}")
}

/// IPv6 text forms (RFC 4291 §2.2, with an IPv4 tail), as Rust parses them.
pub fn ipv6_pattern() -> String {
    let h = "[0-9a-fA-F]{1,4}";
    let ls32 = format!("({h}:{h}|{})", ipv4_pattern());
    let head = |k: usize| if k == 0 { String::new() } else { format!("(({h}:){{0,{}}}{h})?", k - 1) };
    let alts = [
        format!("({h}:){{6}}{ls32}"),
        format!("::({h}:){{5}}{ls32}"),
        format!("{}::({h}:){{4}}{ls32}", head(1)),
        format!("{}::({h}:){{3}}{ls32}", head(2)),
        format!("{}::({h}:){{2}}{ls32}", head(3)),
        format!("{}::{h}:{ls32}", head(4)),
        format!("{}::{ls32}", head(5)),
        format!("{}::{h}", head(6)),
        format!("{}::", head(7)),
    ];
    format!("({})", alts.join("|"))
}

/// An IPv4 or IPv6 address.
pub fn ip_pattern() -> String {
    format!("^({}|{})$", ipv4_pattern(), ipv6_pattern())
}

/// A pool entry: an address, a CIDR, or a same-family `a-b` range.
pub fn pool_entry_pattern() -> String {
    let (v4, v6) = (ipv4_pattern(), ipv6_pattern());
    let v4_len = decimal_at_most(32);
    let v6_len = decimal_at_most(128);
    format!("^({v4}|{v6}|{v4}/{v4_len}|{v6}/{v6_len}|{v4}-{v4}|{v6}-{v6})$")
}

/// A community: `ASN:VALUE`, `large:A:B:C` or a well-known name (any case).
pub fn community_pattern() -> String {
    let (u16p, u32p) = (uint_pattern(u64::from(u16::MAX)), uint_pattern(u64::from(u32::MAX)));
    // ASCII case-insensitive, spelled out: RE2's (?i) also folds e.g. U+212A into 'k'.
    let any_case = |name: &str| -> String {
        name.chars()
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
                } else {
                    c.to_string()
                }
            })
            .collect()
    };
    let names: Vec<String> = crate::community::WELL_KNOWN.iter().map(|(n, _, _)| any_case(n)).collect();
    format!("^({u16p}:{u16p}|large:{u32p}:{u32p}:{u32p}|{})$", names.join("|"))
}

/// Linux interface name as the validator accepts it: printable ASCII without '/' and ':'.
pub const INTERFACE_PATTERN: &str = r"^[!-.0-9;-~]{1,15}$";

/// A DNS-1123 subdomain, as object and node names are.
pub const DNS_SUBDOMAIN_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A DNS-1123 label, as namespace names are.
pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// Lists that rules iterate are bounded so the apiserver's CEL cost estimate stays low;
/// lists nobody needs long are bounded too, to keep the estimate of enclosing rules low.
const MAX_LIST: u64 = 64;

fn rule(rule: &str, field: &str, message: &str) -> Value {
    json!({"rule": rule, "fieldPath": field, "message": message})
}

fn duration_schema() -> Value {
    json!({"pattern": DURATION_PATTERN, "maxLength": DURATION_MAX_LEN})
}

/// Merges `patch` into the schema at `path` (`[]` steps into list items).
fn merge(schema: &mut Value, path: &[&str], patch: Value) {
    let mut at = schema;
    for step in path {
        at = if *step == "[]" { &mut at["items"] } else { &mut at["properties"][*step] };
    }
    let (Some(target), Value::Object(patch)) = (at.as_object_mut(), patch) else { return };
    for (k, v) in patch {
        match (target.get_mut(&k), v) {
            (Some(Value::Array(old)), Value::Array(new)) => old.extend(new),
            (_, v) => {
                target.insert(k, v);
            }
        }
    }
}

fn durations(schema: &mut Value, paths: &[&[&str]]) {
    for p in paths {
        merge(schema, p, duration_schema());
    }
}

/// Adds the rules of `kind` to its `openAPIV3Schema`.
pub fn harden(kind: &str, schema: &mut Value) {
    let ip = ip_pattern();
    let list = json!({"maxItems": MAX_LIST});
    match kind {
        "IPAddressPool" => {
            merge(schema, &["spec", "addresses"], json!({"minItems": 1, "maxItems": MAX_LIST}));
            merge(schema, &["spec", "addresses", "[]"], json!({"pattern": pool_entry_pattern()}));
            merge(schema, &["spec", "serviceAllocation", "namespaces"], list.clone());
            merge(
                schema,
                &["spec", "serviceAllocation", "namespaces", "[]"],
                json!({"pattern": DNS_LABEL_PATTERN, "maxLength": 63}),
            );
        }
        "BGPPeer" => {
            merge(schema, &["spec", "peerAddress"], json!({"pattern": ip}));
            merge(schema, &["spec", "interface"], json!({"pattern": INTERFACE_PATTERN}));
            merge(schema, &["spec", "sourceAddress"], json!({"pattern": ip}));
            merge(schema, &["spec", "routerID"], json!({"pattern": format!("^{}$", ipv4_pattern())}));
            durations(
                schema,
                &[
                    &["spec", "holdTime"],
                    &["spec", "keepaliveTime"],
                    &["spec", "connectTime"],
                    &["spec", "gracefulRestart", "restartTime"],
                ],
            );
            for f in ["name", "namespace", "key"] {
                merge(schema, &["spec", "passwordSecret", f], json!({"minLength": 1}));
            }
            merge(schema, &["spec", "passwordFile"], json!({"pattern": "^/"}));
            merge(
                schema,
                &["spec", "addressFamilies"],
                json!({"minItems": 1, "maxItems": 2, "x-kubernetes-list-type": "set"}),
            );
            merge(schema, &["spec", "nodeSelectors"], list.clone());
            merge(
                schema,
                &["spec", "gracefulRestart"],
                json!({"x-kubernetes-validations": [rule(
                    "!has(self.restartTime) || duration(self.restartTime) < duration('4096s')",
                    ".restartTime",
                    "spec.gracefulRestart.restartTime exceeds the 4095s RFC 4724 allows; use at most 4095s",
                )]}),
            );
            merge(
                schema,
                &["spec"],
                json!({"x-kubernetes-validations": [
                    rule(
                        "has(self.peerAddress) != has(self.interface)",
                        ".peerAddress",
                        "set exactly one of spec.peerAddress (the router's address) and spec.interface (unnumbered: the router found on that link)",
                    ),
                    rule(
                        "has(self.peerASN) != has(self.dynamicASN)",
                        ".peerASN",
                        "set exactly one of spec.peerASN (the router's AS) and spec.dynamicASN (internal or external)",
                    ),
                    // Whole seconds: int(duration) is nanoseconds.
                    rule(
                        "duration(self.holdTime) == duration('0s') || (duration(self.holdTime) >= duration('3s') && duration(self.holdTime) <= duration('65535s') && int(duration(self.holdTime)) % 1000000000 == 0)",
                        ".holdTime",
                        "spec.holdTime must be whole seconds in 3s..65535s, or 0s with bfdProfile; set e.g. holdTime: 90s",
                    ),
                    rule(
                        "duration(self.holdTime) != duration('0s') || has(self.bfdProfile)",
                        ".holdTime",
                        "spec.holdTime 0s turns off keepalives and the hold timer, so a dead router would never be noticed; set holdTime to 3s..65535s, or set bfdProfile",
                    ),
                    rule(
                        "!has(self.keepaliveTime) || duration(self.keepaliveTime) <= duration(self.holdTime)",
                        ".keepaliveTime",
                        "spec.keepaliveTime is longer than spec.holdTime; set it to at most holdTime (usually holdTime/3), or omit it",
                    ),
                    rule(
                        "duration(self.connectTime) > duration('0s')",
                        ".connectTime",
                        "spec.connectTime 0 would retry in a busy loop; use e.g. 5s",
                    ),
                    rule(
                        "!(has(self.ttlSecurity) && self.ttlSecurity && has(self.ebgpMultiHop) && self.ebgpMultiHop)",
                        ".ttlSecurity",
                        "spec.ttlSecurity accepts only a directly connected router, which contradicts spec.ebgpMultiHop; set one of them to false",
                    ),
                    rule(
                        "!has(self.passwordFile)",
                        ".passwordFile",
                        "spec.passwordFile is read only from static files and checkpoints; in a cluster put the password in a Secret and set spec.passwordSecret",
                    ),
                    rule(
                        "!has(self.sourceAddress) || !has(self.peerAddress) || self.sourceAddress.contains(':') == self.peerAddress.contains(':')",
                        ".sourceAddress",
                        "spec.sourceAddress and spec.peerAddress are of different families; use a source address of the peer's family",
                    ),
                ]}),
            );
        }
        "BGPAdvertisement" => {
            merge(schema, &["spec", "aggregationLength"], json!({"minimum": 0, "maximum": 32}));
            merge(schema, &["spec", "aggregationLengthV6"], json!({"minimum": 0, "maximum": 128}));
            merge(schema, &["spec", "communities"], list.clone());
            merge(schema, &["spec", "communities", "[]"], json!({"pattern": community_pattern()}));
            // The 1M..1000T range is the validator's alone (a pattern cannot compare).
            merge(schema, &["spec", "linkBandwidth"], json!({"pattern": "^(endpoints|[0-9]{1,16}[KMGT]?)$"}));
        }
        "L2Advertisement" => {
            merge(schema, &["spec", "interfaces"], list.clone());
            merge(schema, &["spec", "nodePreferences"], list.clone());
            merge(
                schema,
                &["spec", "interfaces", "[]"],
                json!({"pattern": INTERFACE_PATTERN, "x-kubernetes-validations": [rule(
                    "self != '.' && self != '..'",
                    "",
                    "spec.interfaces: '.' and '..' are not interface names; write a Linux interface name such as eth0",
                )]}),
            );
        }
        "BFDProfile" => {
            durations(schema, &[&["spec", "receiveInterval"], &["spec", "transmitInterval"]]);
            merge(schema, &["spec", "detectMultiplier"], json!({"minimum": 2, "maximum": 255}));
            merge(schema, &["spec", "minimumTtl"], json!({"minimum": 1, "maximum": 254}));
            let in_range = |f: &str| {
                rule(
                    &format!(
                        "duration(self.{f}) >= duration('10ms') && duration(self.{f}) <= duration('60s')"
                    ),
                    &format!(".{f}"),
                    &format!("spec.{f} is outside 10ms..60s; use e.g. 300ms"),
                )
            };
            merge(
                schema,
                &["spec"],
                json!({"x-kubernetes-validations": [in_range("receiveInterval"), in_range("transmitInterval")]}),
            );
        }
        "ControlPlaneVIP" => {
            merge(schema, &["spec", "address"], json!({"pattern": ip}));
            merge(schema, &["spec", "interface"], json!({"pattern": INTERFACE_PATTERN}));
            merge(schema, &["spec", "membershipKeyFile"], json!({"pattern": "^/"}));
            merge(schema, &["spec", "members"], json!({"maxItems": 16}));
            merge(
                schema,
                &["spec", "members", "[]", "name"],
                json!({"pattern": DNS_SUBDOMAIN_PATTERN, "maxLength": 253}),
            );
            merge(schema, &["spec", "members", "[]", "address"], json!({"pattern": ip}));
            durations(schema, &[&["spec", "healthCheck", "interval"], &["spec", "healthCheck", "timeout"]]);
            merge(schema, &["spec", "healthCheck", "failureThreshold"], json!({"minimum": 1}));
            merge(schema, &["spec", "bgp", "peers"], list.clone());
            merge(schema, &["spec", "bgp", "communities"], list.clone());
            merge(schema, &["spec", "bgp", "communities", "[]"], json!({"pattern": community_pattern()}));
            let positive = |f: &str| {
                rule(
                    &format!("duration(self.{f}) > duration('0s')"),
                    &format!(".{f}"),
                    &format!("spec.healthCheck.{f} must be more than 0; use e.g. 1s"),
                )
            };
            merge(
                schema,
                &["spec", "healthCheck"],
                json!({"x-kubernetes-validations": [positive("interval"), positive("timeout")]}),
            );
            merge(
                schema,
                &["spec"],
                json!({"x-kubernetes-validations": [
                    rule(
                        "self.membershipPort != 7946",
                        ".membershipPort",
                        "spec.membershipPort 7946 is the speakers' membership port, and both run on control-plane nodes; use 7947",
                    ),
                    rule(
                        "self.mode != 'L2' || (has(self.members) && size(self.members) > 0)",
                        ".members",
                        "spec.members is empty, but L2 mode elects the VIP owner among members; list the control-plane nodes with their addresses",
                    ),
                    rule(
                        "self.mode != 'BGP' || (has(self.bgp) && has(self.bgp.peers) && size(self.bgp.peers) > 0)",
                        ".bgp.peers",
                        "spec.bgp.peers is empty, but BGP mode needs at least one peer; list BGPPeer names in spec.bgp.peers",
                    ),
                    rule(
                        "!has(self.members) || self.members.all(m, self.members.exists_one(n, n.name == m.name))",
                        ".members",
                        "spec.members lists a node twice; list each node once",
                    ),
                ]}),
            );
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    fn re(p: &str) -> regex::Regex {
        let anchored = if p.starts_with('^') { p.to_owned() } else { format!("^{p}$") };
        regex::Regex::new(&anchored).unwrap()
    }

    #[test]
    fn uint_patterns_match_exactly_the_parsable_values() {
        for max in [32u64, 128, 65535, 4294967295] {
            let r = re(&uint_pattern(max));
            for v in [0, 1, 9, 10, 31, 32, 33, 99, 100, 127, 128, 129, 255, 999, 65534, 65535, 65536, 99999] {
                assert_eq!(r.is_match(&v.to_string()), v <= max, "{v} against max {max}");
            }
            for v in [max, max + 1, max - 1, max / 2, max * 10] {
                assert_eq!(r.is_match(&v.to_string()), v <= max, "{v} against max {max}");
            }
            assert!(r.is_match("+007"));
            assert!(!r.is_match("-1") && !r.is_match("") && !r.is_match("1 "));
        }
    }

    #[test]
    fn ip_pattern_agrees_with_the_parser() {
        let r = re(&ip_pattern());
        for s in [
            "192.0.2.1",
            "0.0.0.0",
            "255.255.255.255",
            "256.1.1.1",
            "01.2.3.4",
            "1.2.3",
            "1.2.3.4.5",
            "::",
            "::1",
            "2001:db8::1",
            "2001:DB8:0:0:0:0:0:1",
            "2001:db8::",
            "::ffff:192.0.2.1",
            "1:2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7:8:9",
            "1:2:3:4:5:6:7::",
            "1::2::3",
            "1:2:3:4:5:6:1.2.3.4",
            "1:2:3:4:5:6:7:1.2.3.4",
            "::1.2.3.4",
            "12345::1",
            "fe80::1%eth0",
            " 192.0.2.1",
            "2001:db8::/64",
            ":1",
            "1:",
            "1::",
            "::1:2:3:4:5:6:7",
            "1:2:3:4:5:6::",
            "1:2:3:4:5::1.2.3.4",
            "x::1",
        ] {
            assert_eq!(r.is_match(s), s.parse::<IpAddr>().is_ok(), "{s:?}");
        }
    }

    #[test]
    fn duration_pattern_agrees_with_the_parser() {
        let r = re(DURATION_PATTERN);
        for s in [
            "90s",
            "1m30s",
            "300ms",
            "0",
            "+0",
            "0s",
            "1.5s",
            ".5s",
            "1.s",
            "2h",
            "7us",
            "7µs",
            "7μs",
            "3ns",
            "",
            "90",
            "s",
            "-1s",
            " 90s",
            "90s ",
            "1.2.3s",
            "5 days",
            "1d",
            ".s",
            "1m30",
            "+5m",
            "1e3s",
            "99999999999999h",
        ] {
            let parsed = s.parse::<crate::duration::Duration>().is_ok();
            assert_eq!(r.is_match(s) && s.chars().count() <= DURATION_MAX_LEN, parsed, "{s:?}");
        }
    }

    #[test]
    fn community_pattern_agrees_with_the_parser() {
        let r = re(&community_pattern());
        for s in [
            "64512:100",
            "0:0",
            "65535:65535",
            "65536:1",
            "1:65536",
            "large:64512:1:2",
            "large:4294967295:0:0",
            "large:4294967296:0:0",
            "large:1:2",
            "no-export",
            "NO-EXPORT",
            "graceful-shutdown",
            "no-such",
            "64512",
            "",
            "+1:+2",
            "LARGE:1:2:3",
            "1:2:3",
        ] {
            assert_eq!(r.is_match(s), s.parse::<crate::community::Community>().is_ok(), "{s:?}");
        }
    }

    #[test]
    fn pool_entry_pattern_accepts_the_syntax_the_parser_reads() {
        let r = re(&pool_entry_pattern());
        for s in [
            "203.0.113.0/24",
            "198.51.100.10-198.51.100.20",
            "2001:db8:3::/120",
            "192.0.2.7",
            "2001:db8::1-2001:db8::9",
        ] {
            assert!(r.is_match(s), "{s}");
        }
        for s in
            ["203.0.113.0/33", "2001:db8::/129", "192.0.2.1-2001:db8::1", "foo", "192.0.2.0/", "1.2.3.4/24/1"]
        {
            assert!(!r.is_match(s), "{s}");
        }
    }
}
