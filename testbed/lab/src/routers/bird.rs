//! BIRD 2: passive dynamic BGP over a neighbour range, ECMP into the kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{PeerAs, RibPath, Router, RouterSpec};
use crate::netns::Netns;
use crate::process::{Proc, Spawn};
use crate::{Error, Lab, wait};

/// A BIRD 2 daemon in a lab namespace.
#[derive(Debug)]
pub struct Bird {
    ns: Netns,
    socket: PathBuf,
    proc: Proc,
}

impl Bird {
    /// Starts BIRD in the lab's router namespace.
    pub fn start(lab: &Lab, spec: &RouterSpec) -> Result<Self, Error> {
        Self::start_in(lab, lab.router(), "bird", spec)
    }

    /// Starts BIRD in any lab namespace, with `name` for its files.
    pub fn start_in(lab: &Lab, ns: &Netns, name: &str, spec: &RouterSpec) -> Result<Self, Error> {
        let dir = lab.subdir(name)?;
        let conf = dir.join("bird.conf");
        let socket = dir.join("bird.ctl");
        std::fs::write(&conf, config(spec))?;
        let proc = lab.spawn(
            ns,
            Spawn::new(
                name,
                &[
                    "bird",
                    "-f",
                    "-c",
                    &conf.to_string_lossy(),
                    "-s",
                    &socket.to_string_lossy(),
                    "-P",
                    &dir.join("bird.pid").to_string_lossy(),
                ],
            ),
        )?;
        let bird = Bird { ns: ns.clone(), socket, proc };
        wait::until("BIRD control socket", Duration::from_secs(10), || {
            Ok(bird.birdc("show status").ok().filter(|s| s.contains("Daemon is up")).map(|_| ()))
        })?;
        Ok(bird)
    }

    /// Runs a birdc command and returns its output.
    pub fn birdc(&self, cmd: &str) -> Result<String, Error> {
        let mut argv = vec!["birdc", "-s"];
        let sock = self.socket.to_string_lossy().into_owned();
        argv.push(&sock);
        argv.extend(cmd.split_whitespace());
        self.ns.exec(&argv)
    }

    /// The supervised process.
    pub fn process(&mut self) -> &mut Proc {
        &mut self.proc
    }
}

impl Router for Bird {
    fn kind(&self) -> &'static str {
        "bird"
    }

    fn netns(&self) -> &Netns {
        &self.ns
    }

    fn established(&self) -> Result<BTreeSet<IpAddr>, Error> {
        Ok(parse_protocols(&self.birdc("show protocols all")?))
    }

    fn rib(&self) -> Result<Vec<RibPath>, Error> {
        Ok(parse_routes(&self.birdc("show route all")?))
    }

    fn bfd_sessions(&self) -> Result<BTreeMap<IpAddr, String>, Error> {
        Ok(parse_bfd_sessions(&self.birdc("show bfd sessions")?))
    }
}

/// The generated bird.conf.
pub fn config(spec: &RouterSpec) -> String {
    let mut c = String::new();
    let _ = writeln!(c, "log stderr all;\nrouter id {};", spec.router_id);
    c.push_str("protocol device { scan time 1; }\n");
    for fam in ["ipv4", "ipv6"] {
        // Only BGP routes go to the kernel; merged paths become one ECMP route.
        let _ = writeln!(
            c,
            "protocol kernel kernel_{fam} {{ {fam} {{ import none; export where source = RTS_BGP; }}; merge paths on; }}"
        );
    }
    if let Some(bfd) = &spec.bfd {
        let ms = bfd.interval.as_millis();
        let _ = writeln!(
            c,
            "protocol bfd ferrolb_bfd {{\n  interface \"{}\" {{ min rx interval {ms} ms; min tx interval {ms} ms; multiplier {}; }};",
            bfd.interface, bfd.multiplier
        );
        for n in &bfd.neighbors {
            let _ = writeln!(c, "  neighbor {n} dev \"{}\";", bfd.interface);
        }
        c.push_str("}\n");
    }
    let peer = match spec.peer_as {
        PeerAs::Asn(a) => format!("as {a}"),
        PeerAs::External => "external".into(),
    };
    let mut sessions: Vec<(String, String)> =
        spec.ranges.iter().map(|r| (format!("neighbor range {r} {peer};"), r.clone())).collect();
    sessions.extend(spec.neighbors.iter().map(|n| (format!("neighbor {n} {peer};"), n.to_string())));
    // Unnumbered: the speaker's link-local address on the link, IPv4 over an IPv6 next
    // hop, and router advertisements (lifetime 0: no default router) so the speaker finds
    // this router.
    for u in &spec.interfaces {
        let i = &u.interface;
        sessions.push((format!("neighbor {}%{i} {peer};", u.neighbor), format!("%{i}")));
        let _ = writeln!(
            c,
            "protocol radv radv_{i} {{ ipv6 {{ export none; }}; interface \"{i}\" {{ max ra interval 4; default lifetime 0; }}; }}"
        );
    }
    for (i, (neighbor, _)) in sessions.iter().enumerate() {
        let _ = writeln!(c, "protocol bgp speakers{i} {{");
        let _ = writeln!(c, "  local as {};\n  {neighbor}", spec.asn);
        if neighbor.starts_with("neighbor range") {
            let _ = writeln!(c, "  dynamic name \"peer{i}_\";");
        } else if !spec.active {
            c.push_str("  passive on;\n");
        } else {
            // Connect at once and retry quickly (the default waits up to 5 s, then 120 s).
            c.push_str("  connect delay time 0;\n  connect retry time 1;\n");
            if spec.bfd.is_none() {
                c.push_str("  error wait time 1, 5;\n");
            }
        }
        if spec.ttl_security {
            c.push_str("  ttl security on;\n");
        }
        if let Some(hops) = spec.multihop {
            let _ = writeln!(c, "  multihop {hops};");
        }
        if spec.peer_asn() == Some(spec.asn) && spec.multihop.is_none() {
            // iBGP is multihop by default in BIRD, which refuses `gateway direct`
            // there; the speakers share the router's LAN, so the session is direct.
            c.push_str("  direct;\n");
        }
        if let Some(pw) = &spec.password {
            let _ = writeln!(c, "  password \"{pw}\";");
        }
        if let Some(gr) = spec.graceful_restart {
            let _ = writeln!(c, "  graceful restart on;\n  graceful restart time {};", gr.as_secs());
        }
        if let Some(h) = spec.hold_time {
            let _ = writeln!(c, "  hold time {h};");
        }
        if spec.bfd.is_some() {
            // RFC 5882: BFD Down takes the BGP session down (BIRD's `bfd on`).
            // A BFD Down is an error for BIRD, which then refuses the peer for `error
            // wait time` (default 60 s); keep that short so the path returns quickly.
            c.push_str("  bfd on;\n  error wait time 1, 5;\n");
        }
        // BIRD refuses `gateway direct` for multihop sessions.
        let gateway = if spec.multihop.is_some() { "recursive" } else { "direct" };
        let unnumbered = neighbor.contains('%');
        for fam in ["ipv4", "ipv6"] {
            // RFC 8326 as an operator configures it: GRACEFUL_SHUTDOWN lowers the
            // route's preference to 0, so ECMP keeps only the paths not draining.
            let enhe = if unnumbered && fam == "ipv4" { " extended next hop on;" } else { "" };
            let _ = writeln!(
                c,
                "  {fam} {{ import filter {{ if (65535, 0) ~ bgp_community then bgp_local_pref = 0; accept; }}; export none; gateway {gateway};{enhe} }};"
            );
        }
        c.push_str("}\n");
    }
    c
}

/// Neighbour addresses of the BGP protocols in state Established.
pub fn parse_protocols(text: &str) -> BTreeSet<IpAddr> {
    let mut up = BTreeSet::new();
    let mut neighbor: Option<IpAddr> = None;
    let mut established = false;
    let mut flush = |n: &mut Option<IpAddr>, e: &mut bool| {
        if let (Some(a), true) = (n.take(), *e) {
            up.insert(a);
        }
        *e = false;
    };
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) {
            flush(&mut neighbor, &mut established);
            continue;
        }
        let l = line.trim();
        if let Some(a) = l.strip_prefix("Neighbor address:") {
            neighbor = a.trim().parse().ok();
        } else if let Some(s) = l.strip_prefix("BGP state:") {
            established = s.trim() == "Established";
        }
    }
    flush(&mut neighbor, &mut established);
    up
}

/// Session states of `show bfd sessions`, lower-case ("up", "down", "init", "admindown").
pub fn parse_bfd_sessions(text: &str) -> BTreeMap<IpAddr, String> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr: IpAddr = f.next()?.parse().ok()?;
            let _interface = f.next()?;
            Some((addr, f.next()?.to_lowercase()))
        })
        .collect()
}

/// Paths of `show route all` (both tables).
pub fn parse_routes(text: &str) -> Vec<RibPath> {
    let mut out: Vec<RibPath> = Vec::new();
    let mut prefix = String::new();
    for line in text.lines() {
        if line.starts_with("BIRD ") || line.starts_with("Table ") || line.trim().is_empty() {
            continue;
        }
        if !line.starts_with('\t') {
            // "203.0.113.10/32  unicast [peer0_1 …] * (100) [AS64513i]" or a further path
            // of the same prefix, indented with spaces.
            let first = line.split_whitespace().next().unwrap_or_default();
            if !line.starts_with(' ') && first.contains('/') {
                prefix = first.to_string();
            }
            out.push(RibPath { prefix: prefix.clone(), ..Default::default() });
            continue;
        }
        let Some(path) = out.last_mut() else { continue };
        let l = line.trim();
        if let Some(v) = l.strip_prefix("BGP.next_hop:") {
            path.next_hop = v.split_whitespace().next().and_then(|a| a.parse().ok());
        } else if let Some(v) = l.strip_prefix("BGP.as_path:") {
            path.as_path =
                v.split_whitespace().filter_map(|a| a.trim_matches(['{', '}']).parse().ok()).collect();
        } else if let Some(v) = l.strip_prefix("BGP.local_pref:") {
            path.local_pref = v.trim().parse().ok();
        } else if let Some(v) = l.strip_prefix("BGP.med:") {
            path.med = v.trim().parse().ok();
        } else if let Some(v) = l.strip_prefix("BGP.community:") {
            path.communities = tuples(v).into_iter().map(|t| t.join(":")).collect();
        } else if let Some(v) = l.strip_prefix("BGP.large_community:") {
            path.large_communities = tuples(v).into_iter().map(|t| t.join(":")).collect();
        }
    }
    out.retain(|p| !p.prefix.is_empty());
    out
}

/// `(64512,100) (64512,200)` → [["64512","100"], ["64512","200"]].
fn tuples(v: &str) -> Vec<Vec<String>> {
    v.split(')')
        .filter_map(|t| t.trim().strip_prefix('('))
        .map(|t| t.split(',').map(|x| x.trim().to_string()).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROTOCOLS: &str = "BIRD 2.0.12 ready.
Name       Proto      Table      State  Since         Info
device1    Device     ---        up     14:00:00.000
speakers0  BGP        ---        start  14:00:00.000  Passive
  BGP state:          Passive
peer0_1    BGP        ---        up     14:00:01.000  Established
  BGP state:          Established
    Neighbor address: 192.0.2.11
    Neighbor AS:      64513
peer0_2    BGP        ---        start  14:00:01.000  Connect
  BGP state:          Connect
    Neighbor address: 192.0.2.12
";

    const ROUTES: &str = "BIRD 2.0.12 ready.
Table master4:
203.0.113.10/32      unicast [peer0_1 14:20:10.123] * (100) [AS64513i]
\tvia 192.0.2.11 on eth0
\tType: BGP univ
\tBGP.origin: IGP
\tBGP.as_path: 64513
\tBGP.next_hop: 192.0.2.11
\tBGP.local_pref: 100
\tBGP.community: (64512,100) (64512,200)
\tBGP.large_community: (64512, 1, 2)
                     unicast [peer0_2 14:20:10.123] (100) [AS64513i]
\tvia 192.0.2.12 on eth0
\tBGP.next_hop: 192.0.2.12
Table master6:
2001:db8:3::10/128   unicast [peer1_1 14:20:10.123] * (100) [AS64513i]
\tvia 2001:db8::11 on eth0
\tBGP.next_hop: 2001:db8::11 fe80::1
";

    #[test]
    fn established_neighbours_are_parsed() {
        let up = parse_protocols(PROTOCOLS);
        assert_eq!(up.into_iter().collect::<Vec<_>>(), vec!["192.0.2.11".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn paths_with_attributes_are_parsed() {
        let r = parse_routes(ROUTES);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].prefix, "203.0.113.10/32");
        assert_eq!(r[0].communities, vec!["64512:100", "64512:200"]);
        assert_eq!(r[0].large_communities, vec!["64512:1:2"]);
        assert_eq!(r[0].local_pref, Some(100));
        assert_eq!(r[0].as_path, vec![64513]);
        assert_eq!(r[1].prefix, "203.0.113.10/32");
        assert_eq!(r[1].next_hop, Some("192.0.2.12".parse().unwrap()));
        assert_eq!(r[2].prefix, "2001:db8:3::10/128");
        assert_eq!(r[2].next_hop, Some("2001:db8::11".parse().unwrap()));
    }

    #[test]
    fn bfd_sessions_are_parsed() {
        let text = "BIRD 2.0.12 ready.
ferrolb_bfd:
IP address                Interface  State      Since         Interval  Timeout
192.0.2.11                eth0       Up         10:47:12.345    0.300    0.900
2001:db8::12              eth0       Down       10:47:10.000    1.000    0.000
";
        let s = parse_bfd_sessions(text);
        assert_eq!(s.get(&"192.0.2.11".parse().unwrap()).map(String::as_str), Some("up"));
        assert_eq!(s.get(&"2001:db8::12".parse().unwrap()).map(String::as_str), Some("down"));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn ibgp_sessions_are_direct_so_gateway_direct_is_accepted() {
        assert!(!config(&RouterSpec::default()).contains("  direct;"));
        assert!(config(&RouterSpec::default().ibgp()).contains("  direct;"));
    }

    #[test]
    fn config_has_bfd_neighbours_only_when_asked() {
        assert!(!config(&RouterSpec::default()).contains("protocol bfd"));
        let spec = RouterSpec::default().bfd(super::super::BfdSpec::lan(&["192.0.2.11".parse().unwrap()]));
        let c = config(&spec);
        assert!(c.contains("min rx interval 300 ms; min tx interval 300 ms; multiplier 3;"), "{c}");
        assert!(c.contains("neighbor 192.0.2.11 dev \"eth0\";"), "{c}");
        assert!(c.contains("  bfd on;"), "{c}");
        assert!(!config(&RouterSpec::default()).contains("bfd on"));
    }

    #[test]
    fn config_has_ttl_security_multihop_and_active_neighbours() {
        let plain = config(&RouterSpec::default());
        assert!(!plain.contains("ttl security") && !plain.contains("multihop"), "{plain}");
        let spec = RouterSpec {
            ttl_security: true,
            multihop: Some(2),
            active: true,
            ranges: Vec::new(),
            neighbors: vec!["192.0.2.11".parse().unwrap()],
            ..RouterSpec::default()
        };
        let c = config(&spec);
        assert!(c.contains("  ttl security on;\n  multihop 2;"), "{c}");
        assert!(!c.contains("passive on") && c.contains("connect retry time 1;"), "{c}");
        assert!(c.contains("gateway recursive;") && !c.contains("gateway direct;"), "{c}");
    }

    #[test]
    fn config_has_ranges_password_and_gr() {
        let spec = RouterSpec::default().password("s3cret").graceful_restart(Duration::from_secs(120));
        let c = config(&spec);
        assert!(c.contains("neighbor range 192.0.2.0/24 as 64513;"), "{c}");
        assert!(c.contains("neighbor range 2001:db8::/64 as 64513;"), "{c}");
        assert!(c.contains("password \"s3cret\";"));
        assert!(c.contains("graceful restart time 120;"));
        assert!(c.contains("merge paths on"));
        assert!(c.contains("if (65535, 0) ~ bgp_community then bgp_local_pref = 0"), "{c}");
    }
}
