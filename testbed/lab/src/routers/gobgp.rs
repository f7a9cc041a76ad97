//! GoBGP with dynamic neighbours; its RIB is copied into the kernel by the testbed
//! (GoBGP 3.10 cannot program the kernel through FRR 8.4's zebra).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

use super::{PeerAs, RibPath, Router, RouterSpec, community_from_u32};
use crate::netns::Netns;
use crate::process::{Proc, Spawn};
use crate::{Error, Lab, wait};

/// Routing protocol number marking the routes the testbed copies from GoBGP's RIB.
pub const KERNEL_PROTO: &str = "200";
const API: &str = "127.0.0.1:50051";

/// A gobgpd in a lab namespace, with its RIB mirrored into the kernel.
#[derive(Debug)]
pub struct GoBgp {
    ns: Netns,
    proc: Proc,
    stop: Arc<AtomicBool>,
    sync: Option<JoinHandle<()>>,
}

/// gobgpd named `name`, reading TOML config `conf`, its API on [`API`] (pprof off).
pub fn daemon(name: &str, conf: &std::path::Path) -> Spawn {
    let conf = conf.to_string_lossy();
    Spawn::new(name, &["gobgpd", "-f", &conf, "-t", "toml", "--api-hosts", API, "--pprof-disable"])
}

impl GoBgp {
    /// Starts gobgpd in the lab's router namespace.
    pub fn start(lab: &Lab, spec: &RouterSpec) -> Result<Self, Error> {
        let ns = lab.router().clone();
        let dir = lab.subdir("gobgp")?;
        let conf = dir.join("gobgpd.toml");
        std::fs::write(&conf, config(spec))?;
        let proc = lab.spawn(&ns, daemon("gobgpd", &conf))?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut g = GoBgp { ns, proc, stop, sync: None };
        wait::until("gobgpd API", Duration::from_secs(15), || Ok(g.gobgp(&["global"]).ok().map(|_| ())))?;
        let (ns2, stop2) = (g.ns.clone(), g.stop.clone());
        g.sync = Some(std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let _ = sync_kernel(&ns2);
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
        Ok(g)
    }

    /// Runs the gobgp CLI against this daemon.
    pub fn gobgp(&self, args: &[&str]) -> Result<String, Error> {
        let (host, port) = API.split_once(':').unwrap_or((API, "50051"));
        let mut argv = vec!["gobgp", "-u", host, "-p", port];
        argv.extend_from_slice(args);
        self.ns.exec(&argv)
    }

    /// The supervised process.
    pub fn process(&mut self) -> &mut Proc {
        &mut self.proc
    }
}

impl Drop for GoBgp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.sync.take() {
            let _ = h.join();
        }
    }
}

impl Router for GoBgp {
    fn kind(&self) -> &'static str {
        "gobgp"
    }

    fn netns(&self) -> &Netns {
        &self.ns
    }

    fn established(&self) -> Result<BTreeSet<IpAddr>, Error> {
        let v = json(&self.gobgp(&["neighbor", "-j"])?)?;
        Ok(parse_neighbors(&v))
    }

    fn rib(&self) -> Result<Vec<RibPath>, Error> {
        rib(&self.ns)
    }
}

fn json(text: &str) -> Result<Value, Error> {
    serde_json::from_str(text.trim()).map_err(|e| Error::Parse(format!("gobgp json: {e}: {text}")))
}

fn rib(ns: &Netns) -> Result<Vec<RibPath>, Error> {
    let mut out = Vec::new();
    for fam in ["ipv4", "ipv6"] {
        let text = ns.exec(&["gobgp", "-u", "127.0.0.1", "-p", "50051", "global", "rib", "-a", fam, "-j"])?;
        out.extend(parse_rib(&json(&text)?));
    }
    Ok(out)
}

/// Mirrors GoBGP's RIB into the kernel: one (ECMP) route per prefix over all paths.
fn sync_kernel(ns: &Netns) -> Result<(), Error> {
    let mut want: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
    for p in rib(ns)? {
        if let Some(nh) = p.next_hop {
            want.entry(p.prefix).or_default().insert(nh);
        }
    }
    let mut have: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
    for r in super::kernel_routes(ns)?.into_iter().filter(|r| r.protocol == KERNEL_PROTO) {
        have.insert(r.prefix, r.via.into_iter().collect());
    }
    for (prefix, hops) in &want {
        if have.get(prefix) == Some(hops) {
            continue;
        }
        let fam = if prefix.contains(':') { "-6" } else { "-4" };
        let mut args: Vec<String> =
            [fam, "route", "replace", prefix, "proto", KERNEL_PROTO].map(String::from).to_vec();
        for h in hops {
            args.extend(["nexthop".into(), "via".into(), h.to_string()]);
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        ns.ip(&argv)?;
    }
    for prefix in have.keys().filter(|p| !want.contains_key(*p)) {
        let fam = if prefix.contains(':') { "-6" } else { "-4" };
        ns.ip(&[fam, "route", "del", prefix, "proto", KERNEL_PROTO])?;
    }
    Ok(())
}

/// The generated gobgpd.toml.
pub fn config(spec: &RouterSpec) -> String {
    let mut c = String::new();
    let _ = writeln!(
        c,
        "[global.config]\n  as = {}\n  router-id = \"{}\"\n  port = 179",
        spec.asn, spec.router_id
    );
    c.push_str("[global.use-multiple-paths.config]\n  enabled = true\n");
    let peer_as = match spec.peer_as {
        PeerAs::Asn(a) => a,
        // GoBGP peer groups need a concrete ASN; the lab's nodes use NODE_ASN.
        PeerAs::External => crate::addressing::NODE_ASN,
    };
    c.push_str("[[peer-groups]]\n  [peer-groups.config]\n    peer-group-name = \"speakers\"\n");
    let _ = writeln!(c, "    peer-as = {peer_as}");
    if let Some(pw) = &spec.password {
        let _ = writeln!(c, "    auth-password = \"{pw}\"");
    }
    if let Some(h) = spec.hold_time {
        let _ = writeln!(
            c,
            "  [peer-groups.timers.config]\n    hold-time = {h}\n    keepalive-interval = {}",
            (h / 3).max(1)
        );
    }
    if let Some(gr) = spec.graceful_restart {
        let _ = writeln!(
            c,
            "  [peer-groups.graceful-restart.config]\n    enabled = true\n    restart-time = {}",
            gr.as_secs()
        );
    }
    for fam in ["ipv4-unicast", "ipv6-unicast"] {
        let _ = writeln!(
            c,
            "  [[peer-groups.afi-safis]]\n    [peer-groups.afi-safis.config]\n      afi-safi-name = \"{fam}\""
        );
        if spec.graceful_restart.is_some() {
            let _ =
                writeln!(c, "    [peer-groups.afi-safis.mp-graceful-restart.config]\n      enabled = true");
        }
    }
    if spec.neighbors.is_empty() {
        for r in &spec.ranges {
            let _ = writeln!(
                c,
                "[[dynamic-neighbors]]\n  [dynamic-neighbors.config]\n    prefix = \"{r}\"\n    peer-group = \"speakers\""
            );
        }
    }
    for n in &spec.neighbors {
        let _ = writeln!(
            c,
            "[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{n}\"\n    peer-group = \"speakers\"\n  [neighbors.transport.config]\n    passive-mode = true"
        );
    }
    c
}

/// Established neighbours from `gobgp neighbor -j`.
pub fn parse_neighbors(v: &Value) -> BTreeSet<IpAddr> {
    let mut up = BTreeSet::new();
    for n in v.as_array().into_iter().flatten() {
        let state = &n["state"]["session_state"];
        let established = state.as_u64() == Some(6)
            || state.as_str().is_some_and(|s| s.eq_ignore_ascii_case("established"));
        let addr = n["state"]["neighbor_address"].as_str().or_else(|| n["conf"]["neighbor_address"].as_str());
        if let (true, Some(a)) = (established, addr.and_then(|a| a.parse().ok())) {
            up.insert(a);
        }
    }
    up
}

/// Paths of `gobgp global rib -a <fam> -j`.
pub fn parse_rib(v: &Value) -> Vec<RibPath> {
    let mut out = Vec::new();
    let Some(map) = v.as_object() else { return out };
    for (prefix, paths) in map {
        for p in paths.as_array().into_iter().flatten() {
            let mut path = RibPath {
                prefix: prefix.clone(),
                peer: p["neighbor-ip"].as_str().and_then(|a| a.parse().ok()),
                ..Default::default()
            };
            for a in p["attrs"].as_array().into_iter().flatten() {
                match a["type"].as_u64() {
                    Some(2) => {
                        for seg in a["as_paths"].as_array().into_iter().flatten() {
                            path.as_path.extend(
                                seg["asns"]
                                    .as_array()
                                    .into_iter()
                                    .flatten()
                                    .filter_map(|x| x.as_u64())
                                    .filter_map(|x| u32::try_from(x).ok()),
                            );
                        }
                    }
                    Some(3) | Some(14) if path.next_hop.is_none() => {
                        path.next_hop = a["nexthop"].as_str().and_then(|x| x.parse().ok());
                    }
                    Some(4) => path.med = a["metric"].as_u64().and_then(|x| u32::try_from(x).ok()),
                    Some(5) => path.local_pref = a["value"].as_u64().and_then(|x| u32::try_from(x).ok()),
                    Some(8) => {
                        path.communities = a["communities"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|c| c.as_u64())
                            .map(community_from_u32)
                            .collect()
                    }
                    Some(32) => {
                        path.large_communities = a["value"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|c| format!("{}:{}:{}", c["ASN"], c["LocalData1"], c["LocalData2"]))
                            .collect()
                    }
                    _ => {}
                }
            }
            out.push(path);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rib_json_is_parsed_with_attributes() {
        let v: Value = serde_json::from_str(
            r#"{"203.0.113.10/32":[{"nlri":{"prefix":"203.0.113.10/32"},"neighbor-ip":"192.0.2.11",
               "attrs":[{"type":1,"value":0},{"type":2,"as_paths":[{"segment_type":2,"num":1,"asns":[64513]}]},
                        {"type":3,"nexthop":"192.0.2.11"},{"type":4,"metric":50},{"type":5,"value":200},
                        {"type":8,"communities":[4227858532]},
                        {"type":32,"value":[{"ASN":64512,"LocalData1":1,"LocalData2":2}]}]}]}"#,
        )
        .unwrap();
        let p = &parse_rib(&v)[0];
        assert_eq!(p.next_hop, Some("192.0.2.11".parse().unwrap()));
        assert_eq!(p.as_path, vec![64513]);
        assert_eq!(p.med, Some(50));
        assert_eq!(p.local_pref, Some(200));
        assert_eq!(p.communities, vec!["64512:100"]);
        assert_eq!(p.large_communities, vec!["64512:1:2"]);
    }

    #[test]
    fn only_established_neighbours_are_listed() {
        let v: Value = serde_json::from_str(
            r#"[{"conf":{"neighbor_address":"192.0.2.11"},"state":{"session_state":6}},
                {"conf":{"neighbor_address":"192.0.2.12"},"state":{"session_state":3}}]"#,
        )
        .unwrap();
        assert_eq!(parse_neighbors(&v).len(), 1);
    }
}
