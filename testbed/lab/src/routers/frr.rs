//! FRR (zebra + bgpd) with `bgp listen range`, private run directories per namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::{PeerAs, RibPath, Router, RouterSpec};
use crate::netns::Netns;
use crate::process::{Proc, Spawn};
use crate::{Error, Lab, wait};

/// FRR's zebra and bgpd in a lab namespace.
#[derive(Debug)]
pub struct Frr {
    ns: Netns,
    dir: PathBuf,
    zebra: Proc,
    bgpd: Proc,
    bfdd: Option<Proc>,
}

/// FRR writes here whatever its flags say; each namespace gets its own copy.
const SHARED_DIRS: [&str; 2] = ["/var/run/frr", "/var/tmp/frr"];

impl Frr {
    /// Starts zebra and bgpd in the lab's router namespace.
    pub fn start(lab: &Lab, spec: &RouterSpec) -> Result<Self, Error> {
        let ns = lab.router().clone();
        let dir = lab.subdir("frr")?;
        for d in ["run", "tmp"] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        for d in SHARED_DIRS {
            // Bind-mount targets must exist on the host.
            std::fs::create_dir_all(d)?;
        }
        // Unnumbered links: router advertisements every 3 s (the speaker finds r1 by them).
        let mut zebra = String::from("hostname r1\nlog stdout debugging\n");
        for u in &spec.interfaces {
            let i = &u.interface;
            zebra.push_str(&format!("interface {i}\n ipv6 nd ra-interval 3\n no ipv6 nd suppress-ra\n"));
        }
        std::fs::write(dir.join("zebra.conf"), zebra)?;
        std::fs::write(dir.join("bgpd.conf"), config(spec))?;
        std::fs::write(dir.join("bfdd.conf"), bfdd_config(spec))?;
        // FRR refuses to run as root: its files belong to frr:frr.
        crate::netns::run(std::process::Command::new("chown").args([
            "-R",
            "frr:frr",
            &dir.to_string_lossy(),
        ]))?;
        let zebra = lab.spawn(&ns, daemon(&dir, "zebra", &[]))?;
        wait::until("zebra API socket", Duration::from_secs(10), || {
            Ok(dir.join("run/zserv.api").exists().then_some(()))
        })?;
        let bgpd = lab.spawn(&ns, daemon(&dir, "bgpd", &["-p", "179"]))?;
        let bfdd = match &spec.bfd {
            Some(_) => {
                let ctl = format!("{}/run/bfdd.sock", dir.to_string_lossy());
                Some(lab.spawn(&ns, daemon(&dir, "bfdd", &["--bfdctl", &ctl]))?)
            }
            None => None,
        };
        let frr = Frr { ns, dir, zebra, bgpd, bfdd };
        wait::until("bgpd vty", Duration::from_secs(10), || {
            Ok(frr.vtysh("show bgp summary json").ok().map(|_| ()))
        })?;
        if frr.bfdd.is_some() {
            wait::until("bfdd vty", Duration::from_secs(10), || {
                Ok(frr.json("show bfd peers json").ok().map(|_| ()))
            })?;
        }
        Ok(frr)
    }

    /// Runs a vtysh command against this instance.
    pub fn vtysh(&self, cmd: &str) -> Result<String, Error> {
        let sock = self.dir.join("run").to_string_lossy().into_owned();
        self.ns.exec(&["vtysh", "--vty_socket", &sock, "-c", cmd])
    }

    fn json(&self, cmd: &str) -> Result<Value, Error> {
        let text = self.vtysh(cmd)?;
        serde_json::from_str(&text).map_err(|e| Error::Parse(format!("vtysh `{cmd}`: {e}: {text}")))
    }

    /// The bgpd process.
    pub fn bgpd(&mut self) -> &mut Proc {
        &mut self.bgpd
    }

    /// The bfdd process, when the spec asked for BFD.
    pub fn bfdd(&mut self) -> Option<&mut Proc> {
        self.bfdd.as_mut()
    }

    /// The zebra process.
    pub fn zebra(&mut self) -> &mut Proc {
        &mut self.zebra
    }
}

/// A daemon started inside a private mount of FRR's shared directories.
fn daemon(dir: &Path, name: &str, extra: &[&str]) -> Spawn {
    let d = dir.to_string_lossy();
    let mut script = String::new();
    for (shared, private) in SHARED_DIRS.iter().zip(["run", "tmp"]) {
        let _ = write!(script, "mount --bind {d}/{private} {shared} && ");
    }
    let _ = write!(
        script,
        "exec /usr/lib/frr/{name} -u frr -g frr -f {d}/{name}.conf -i {d}/run/{name}.pid \
         -z {d}/run/zserv.api --vty_socket {d}/run {}",
        extra.join(" ")
    );
    Spawn::new(format!("frr-{name}"), &["sh", "-c", &script])
}

impl Router for Frr {
    fn kind(&self) -> &'static str {
        "frr"
    }

    fn netns(&self) -> &Netns {
        &self.ns
    }

    fn established(&self) -> Result<BTreeSet<IpAddr>, Error> {
        Ok(parse_summary(&self.json("show bgp summary json")?))
    }

    fn rib(&self) -> Result<Vec<RibPath>, Error> {
        let mut out = Vec::new();
        for fam in ["ipv4", "ipv6"] {
            let v = self.json(&format!("show bgp {fam} unicast json"))?;
            out.extend(parse_table(&v));
            let prefixes: BTreeSet<String> = out.iter().map(|p: &RibPath| p.prefix.clone()).collect();
            // The table view has no communities: ask per prefix (few in tests).
            if prefixes.len() <= 32 {
                for p in prefixes.iter().filter(|p| p.contains(':') == (fam == "ipv6")) {
                    let detail = self.json(&format!("show bgp {fam} unicast {p} json"))?;
                    merge_detail(&mut out, p, &detail);
                }
            }
        }
        Ok(out)
    }

    fn bfd_sessions(&self) -> Result<BTreeMap<IpAddr, String>, Error> {
        if self.bfdd.is_none() {
            return Err(Error::Missing("this FRR runs no bfdd: set RouterSpec::bfd".into()));
        }
        Ok(parse_bfd_peers(&self.json("show bfd peers json")?))
    }
}

/// The generated bfdd.conf (single-hop peers over the spec's interface).
pub fn bfdd_config(spec: &RouterSpec) -> String {
    let mut c = String::from("hostname r1\nlog stdout informational\n!\n");
    if let Some(bfd) = &spec.bfd {
        c.push_str("bfd\n");
        // The timers of the sessions bgpd makes (`neighbor SPEAKERS bfd profile ferrolb`).
        let ms = bfd.interval.as_millis();
        let _ = writeln!(
            c,
            " profile ferrolb\n  receive-interval {ms}\n  transmit-interval {ms}\n  detect-multiplier {}\n exit\n !",
            bfd.multiplier
        );
        for n in &bfd.neighbors {
            let ms = bfd.interval.as_millis();
            let _ = writeln!(
                c,
                " peer {n} interface {}\n  receive-interval {ms}\n  transmit-interval {ms}\n  detect-multiplier {}\n exit\n !",
                bfd.interface, bfd.multiplier
            );
        }
        c.push_str("exit\n!\n");
    }
    c
}

/// Session states of `show bfd peers json` by peer ("up", "down", "init", "shutdown").
pub fn parse_bfd_peers(v: &Value) -> BTreeMap<IpAddr, String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["peer"].as_str()?.parse().ok()?, p["status"].as_str()?.to_lowercase())))
        .collect()
}

/// The generated bgpd.conf.
pub fn config(spec: &RouterSpec) -> String {
    let mut c = String::new();
    let _ = writeln!(c, "frr defaults traditional\nhostname r1\nlog stdout informational\n!");
    let _ = writeln!(c, "router bgp {}", spec.asn);
    let _ = writeln!(c, " bgp router-id {}", spec.router_id);
    c.push_str(" no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n");
    c.push_str(" bgp bestpath as-path multipath-relax\n");
    if let Some(gr) = spec.graceful_restart {
        let _ = writeln!(c, " bgp graceful-restart\n bgp graceful-restart restart-time {}", gr.as_secs());
    }
    c.push_str(" neighbor SPEAKERS peer-group\n");
    let remote = match spec.peer_as {
        PeerAs::Asn(a) => a.to_string(),
        PeerAs::External => "external".into(),
    };
    let _ = writeln!(c, " neighbor SPEAKERS remote-as {remote}");
    if let Some(pw) = &spec.password {
        let _ = writeln!(c, " neighbor SPEAKERS password {pw}");
    }
    if let Some(h) = spec.hold_time {
        let _ = writeln!(c, " neighbor SPEAKERS timers {} {h}", (h / 3).max(1));
    }
    c.push_str(" neighbor SPEAKERS passive\n");
    if spec.bfd.is_some() {
        // RFC 5882: BFD Down takes the BGP session down (bfdd's peers, registered by bgpd).
        c.push_str(" neighbor SPEAKERS bfd\n neighbor SPEAKERS bfd profile ferrolb\n");
    }
    for r in &spec.ranges {
        let _ = writeln!(c, " bgp listen range {r} peer-group SPEAKERS");
    }
    for n in &spec.neighbors {
        let _ = writeln!(c, " neighbor {n} peer-group SPEAKERS");
    }
    for u in &spec.interfaces {
        let _ = writeln!(c, " neighbor {} interface peer-group SPEAKERS", u.interface);
    }
    for fam in ["ipv4", "ipv6"] {
        let _ = writeln!(
            c,
            " address-family {fam} unicast\n  neighbor SPEAKERS activate\n  maximum-paths 16\n  maximum-paths ibgp 16\n exit-address-family"
        );
    }
    c.push_str("!\n");
    c
}

/// Established neighbours from `show bgp summary json`.
pub fn parse_summary(v: &Value) -> BTreeSet<IpAddr> {
    let mut up = BTreeSet::new();
    for fam in ["ipv4Unicast", "ipv6Unicast"] {
        let Some(peers) = v[fam]["peers"].as_object() else { continue };
        for (addr, p) in peers {
            if let (Some("Established"), Ok(a)) = (p["state"].as_str(), addr.parse()) {
                up.insert(a);
            }
        }
    }
    up
}

/// Paths of `show bgp <fam> unicast json`.
pub fn parse_table(v: &Value) -> Vec<RibPath> {
    let mut out = Vec::new();
    let Some(routes) = v["routes"].as_object() else { return out };
    for (prefix, paths) in routes {
        for p in paths.as_array().into_iter().flatten() {
            let next_hop = p["nexthops"]
                .as_array()
                .and_then(|n| n.iter().find(|h| h["scope"].as_str() != Some("link-local")))
                .and_then(|h| h["ip"].as_str())
                .and_then(|a| a.parse().ok());
            out.push(RibPath {
                prefix: prefix.clone(),
                next_hop,
                peer: p["peerId"].as_str().and_then(|a| a.parse().ok()),
                as_path: p["path"]
                    .as_str()
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|a| a.parse().ok())
                    .collect(),
                local_pref: p["locPrf"].as_u64().and_then(|x| u32::try_from(x).ok()),
                med: p["metric"].as_u64().and_then(|x| u32::try_from(x).ok()),
                ..Default::default()
            });
        }
    }
    out
}

/// Adds communities from `show bgp <fam> unicast <prefix> json` to the matching paths.
fn merge_detail(out: &mut [RibPath], prefix: &str, v: &Value) {
    for p in v["paths"].as_array().into_iter().flatten() {
        let peer: Option<IpAddr> = p["peer"]["peerId"].as_str().and_then(|a| a.parse().ok());
        let comms: Vec<String> = p["community"]["string"]
            .as_str()
            .map(|s| s.split_whitespace().map(String::from).collect())
            .unwrap_or_default();
        let large: Vec<String> = p["largeCommunity"]["string"]
            .as_str()
            .map(|s| s.split_whitespace().map(String::from).collect())
            .unwrap_or_default();
        for path in out.iter_mut().filter(|x| x.prefix == prefix && (peer.is_none() || x.peer == peer)) {
            path.communities = comms.clone();
            path.large_communities = large.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_lists_established_peers_of_both_families() {
        let v: Value = serde_json::from_str(
            r#"{"ipv4Unicast":{"peers":{"192.0.2.11":{"state":"Established"},"192.0.2.12":{"state":"Active"}}},
               "ipv6Unicast":{"peers":{"2001:db8::11":{"state":"Established"}}}}"#,
        )
        .unwrap();
        let up: Vec<String> = parse_summary(&v).iter().map(|a| a.to_string()).collect();
        assert_eq!(up, vec!["192.0.2.11", "2001:db8::11"]);
    }

    #[test]
    fn table_paths_carry_next_hop_and_attributes() {
        let v: Value = serde_json::from_str(
            r#"{"routes":{"203.0.113.10/32":[
                {"valid":true,"peerId":"192.0.2.11","path":"64513","locPrf":100,"metric":5,
                 "nexthops":[{"ip":"192.0.2.11","afi":"ipv4","used":true}]},
                {"valid":true,"peerId":"192.0.2.12","path":"64513",
                 "nexthops":[{"ip":"192.0.2.12","afi":"ipv4","used":true}]}]}}"#,
        )
        .unwrap();
        let p = parse_table(&v);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].next_hop, Some("192.0.2.11".parse().unwrap()));
        assert_eq!(p[0].local_pref, Some(100));
        assert_eq!(p[0].med, Some(5));
        assert_eq!(p[1].as_path, vec![64513]);
    }

    #[test]
    fn bfd_peers_and_config() {
        let v: Value = serde_json::from_str(
            r#"[{"multihop":false,"peer":"192.0.2.11","interface":"eth0","status":"up","diagnostic":"ok"},
                {"multihop":false,"peer":"2001:db8::12","status":"down"}]"#,
        )
        .unwrap();
        let s = parse_bfd_peers(&v);
        assert_eq!(s.get(&"192.0.2.11".parse().unwrap()).map(String::as_str), Some("up"));
        assert_eq!(s.get(&"2001:db8::12".parse().unwrap()).map(String::as_str), Some("down"));
        let spec = RouterSpec::default().bfd(super::super::BfdSpec::lan(&["192.0.2.11".parse().unwrap()]));
        let c = bfdd_config(&spec);
        assert!(c.contains(" peer 192.0.2.11 interface eth0\n  receive-interval 300\n"), "{c}");
        assert!(!bfdd_config(&RouterSpec::default()).contains("peer"));
    }

    #[test]
    fn config_accepts_ebgp_without_policy_and_does_ecmp() {
        let c = config(&RouterSpec::default().password("pw"));
        assert!(c.contains("no bgp ebgp-requires-policy"));
        assert!(c.contains("bgp listen range 192.0.2.0/24 peer-group SPEAKERS"));
        assert!(c.contains("maximum-paths 16"));
        assert!(c.contains("neighbor SPEAKERS password pw"));
        assert!(!c.contains("neighbor SPEAKERS bfd"));
        let spec = RouterSpec::default().bfd(super::super::BfdSpec::lan(&["192.0.2.11".parse().unwrap()]));
        assert!(config(&spec).contains("neighbor SPEAKERS bfd\n"));
    }
}
