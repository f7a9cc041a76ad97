//! ExaBGP 4.2: a stand-in speaker announcing static routes, or a recording peer that
//! reports every message it receives as structured data.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::{RibPath, Router};
use crate::netns::Netns;
use crate::process::{Proc, Spawn, read_lossy};
use crate::{Error, Lab, wait};

/// One neighbour block of an ExaBGP config.
#[derive(Debug, Clone)]
pub struct ExaNeighbor {
    /// The peer's address.
    pub peer: IpAddr,
    /// Our address (also where a passive neighbour listens).
    pub local: IpAddr,
    /// Our ASN.
    pub local_as: u32,
    /// The peer's ASN.
    pub peer_as: u32,
    /// Our router id.
    pub router_id: Ipv4Addr,
    /// Wait for the peer to connect (listening on `local`:179).
    pub passive: bool,
    /// TCP MD5 password.
    pub password: Option<String>,
    /// Advertise graceful restart with this restart time (seconds).
    pub graceful_restart: Option<u16>,
    /// Hold time offered.
    pub hold_time: Option<u16>,
    /// Routes announced once the session is up.
    pub routes: Vec<StaticRoute>,
    /// Keep what was sent and send it again on every new session (ExaBGP's default).
    /// Off, a route announced through [`ExaBgp::command`] is sent once: a malformed one
    /// does not come back after the session reset it caused.
    pub adj_rib_out: bool,
}

impl ExaNeighbor {
    /// An active eBGP neighbour with the lab's default ASNs (node → router).
    pub fn to_router(local: IpAddr, peer: IpAddr, router_id: Ipv4Addr) -> Self {
        ExaNeighbor {
            peer,
            local,
            local_as: crate::addressing::NODE_ASN,
            peer_as: crate::addressing::ROUTER_ASN,
            router_id,
            passive: false,
            password: None,
            graceful_restart: None,
            hold_time: None,
            routes: Vec::new(),
            adj_rib_out: true,
        }
    }

    /// A passive neighbour listening on `local` (also its router id) for node `node`'s
    /// session, as AS `local_as` expecting AS `peer_as`.
    pub fn passive(local: Ipv4Addr, node: usize, local_as: u32, peer_as: u32) -> Self {
        let mut n = Self::to_router(local.into(), crate::addressing::node_ip(node), local);
        n.passive = true;
        (n.local_as, n.peer_as) = (local_as, peer_as);
        n
    }

    /// The recording peer of node `node`: passive, iBGP (the router's ASN), on the
    /// client's LAN address.
    pub fn recorder(node: usize) -> Self {
        Self::passive(
            crate::addressing::CLIENT_V4,
            node,
            crate::addressing::ROUTER_ASN,
            crate::addressing::ROUTER_ASN,
        )
    }

    /// Adds a route.
    pub fn route(mut self, r: StaticRoute) -> Self {
        self.routes.push(r);
        self
    }
}

/// A route ExaBGP announces, with its attributes.
#[derive(Debug, Clone, Default)]
pub struct StaticRoute {
    /// Prefix in CIDR notation.
    pub prefix: String,
    /// NEXT_HOP.
    pub next_hop: Option<IpAddr>,
    /// Communities `asn:value`.
    pub communities: Vec<String>,
    /// Large communities `a:b:c`.
    pub large_communities: Vec<String>,
    /// LOCAL_PREF (iBGP).
    pub local_pref: Option<u32>,
    /// MED.
    pub med: Option<u32>,
}

impl StaticRoute {
    /// A route to `prefix` via `next_hop`.
    pub fn new(prefix: &str, next_hop: IpAddr) -> Self {
        StaticRoute { prefix: prefix.into(), next_hop: Some(next_hop), ..Default::default() }
    }
}

/// An ExaBGP process.
#[derive(Debug)]
pub struct ExaBgp {
    ns: Netns,
    proc: Proc,
    record: PathBuf,
    commands: PathBuf,
}

/// The helper ExaBGP runs: copies every line it is given (JSON messages, and the
/// "done"/"error" answers to API commands) into a file, and hands ExaBGP every line
/// appended to the `commands` file beside it. ExaBGP gives helpers a non-blocking stdin,
/// so make it blocking first.
const RECORDER: &str = r#"import os, sys, threading, time
os.set_blocking(sys.stdin.fileno(), True)
def commands(path):
    pos = 0
    while True:
        with open(path) as f:
            f.seek(pos)
            chunk = f.read()
        done = chunk.rfind("\n") + 1
        if done:
            sys.stdout.write(chunk[:done])
            sys.stdout.flush()
            pos += len(chunk[:done].encode())
        time.sleep(0.05)
threading.Thread(target=commands, args=(os.path.join(os.path.dirname(sys.argv[1]), "commands"),), daemon=True).start()
with open(sys.argv[1], "a", buffering=1) as out:
    for line in sys.stdin:
        out.write(line)
"#;

impl ExaBgp {
    /// Starts ExaBGP in `ns`; every message received from any neighbour is recorded.
    pub fn start(lab: &Lab, ns: &Netns, name: &str, neighbors: &[ExaNeighbor]) -> Result<Self, Error> {
        let dir = lab.subdir(name)?;
        let record = dir.join("received.jsonl");
        let commands = dir.join("commands");
        let script = dir.join("recorder.py");
        std::fs::write(&script, RECORDER)?;
        std::fs::write(&record, "")?;
        std::fs::write(&commands, "")?;
        let conf = dir.join("exabgp.conf");
        std::fs::write(&conf, config(neighbors, &script.to_string_lossy(), &record.to_string_lossy()))?;
        let proc = lab.spawn(
            ns,
            Spawn::new(name, &["exabgp", &conf.to_string_lossy()])
                .env("exabgp_daemon_user", "root")
                .env("exabgp_daemon_drop", "false")
                .env("exabgp_daemon_daemonize", "false")
                .env("exabgp_api_cli", "false")
                .env("exabgp_log_destination", "stdout")
                .env("exabgp_log_level", "INFO"),
        )?;
        Ok(ExaBgp { ns: ns.clone(), proc, record, commands })
    }

    /// Sends one API command (`announce route 198.51.100.0/24 next-hop self attribute
    /// [ 0x01 0xc0 0x00 ]`, `withdraw route ...`) and waits for ExaBGP's answer.
    pub fn command(&self, command: &str, timeout: Duration) -> Result<(), Error> {
        use std::io::Write as _;
        let answers = || {
            read_lossy(&self.record)
                .lines()
                .filter(|l| matches!(*l, "done" | "error"))
                .map(String::from)
                .collect::<Vec<_>>()
        };
        let before = answers().len();
        let mut f = std::fs::OpenOptions::new().append(true).open(&self.commands)?;
        writeln!(f, "{}", command.replace('\n', " "))?;
        let answer = wait::until(&format!("ExaBGP's answer to {command:?}"), timeout, || {
            Ok(answers().get(before).cloned())
        })?;
        if answer == "done" {
            Ok(())
        } else {
            Err(Error::Command {
                command: format!("exabgp API: {command}"),
                detail: "ExaBGP answered \"error\" (its log says why)".into(),
            })
        }
    }

    /// Everything received so far, in order.
    pub fn records(&self) -> Vec<Record> {
        read_lossy(&self.record)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .map(Record::from_json)
            .collect()
    }

    /// The NOTIFICATIONs received so far, as (code, subcode).
    pub fn notifications(&self) -> Vec<(u8, u8)> {
        self.records()
            .into_iter()
            .filter_map(|r| match r {
                Record::Notification { code, subcode, .. } => Some((code, subcode)),
                _ => None,
            })
            .collect()
    }

    /// Waits until a received record satisfies `pred`; returns it.
    pub fn wait_record(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Record) -> bool,
    ) -> Result<Record, Error> {
        wait::until(what, timeout, || Ok(self.records().into_iter().find(|r| pred(r))))
    }

    /// The supervised process.
    pub fn process(&mut self) -> &mut Proc {
        &mut self.proc
    }
}

impl Router for ExaBgp {
    fn kind(&self) -> &'static str {
        "exabgp"
    }

    fn netns(&self) -> &Netns {
        &self.ns
    }

    /// Neighbours whose last state change was "up".
    fn established(&self) -> Result<BTreeSet<IpAddr>, Error> {
        let mut up = BTreeSet::new();
        for r in self.records() {
            if let Record::State { peer, state } = r {
                if state == "up" {
                    up.insert(peer);
                } else {
                    up.remove(&peer);
                }
            }
        }
        Ok(up)
    }

    /// The RIB as rebuilt from the UPDATEs received.
    fn rib(&self) -> Result<Vec<RibPath>, Error> {
        let mut rib: std::collections::BTreeMap<(IpAddr, String), RibPath> = Default::default();
        for r in self.records() {
            match r {
                Record::Update(u) => {
                    for p in &u.withdrawn {
                        rib.remove(&(u.peer, p.clone()));
                    }
                    for (p, nh) in &u.announced {
                        let path = RibPath {
                            prefix: p.clone(),
                            next_hop: *nh,
                            peer: Some(u.peer),
                            as_path: u.attrs.as_path.clone(),
                            local_pref: u.attrs.local_pref,
                            med: u.attrs.med,
                            communities: u.attrs.communities.clone(),
                            large_communities: u.attrs.large_communities.clone(),
                        };
                        rib.insert((u.peer, p.clone()), path);
                    }
                }
                Record::State { peer, state } if state != "up" => rib.retain(|(p, _), _| *p != peer),
                _ => {}
            }
        }
        Ok(rib.into_values().collect())
    }
}

/// A message ExaBGP reported.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// An UPDATE with announcements and/or withdrawals.
    Update(UpdateRecord),
    /// An End-of-RIB marker for a family ("ipv4 unicast").
    EndOfRib { peer: IpAddr, family: String },
    /// A session state change ("connected", "up", "down").
    State { peer: IpAddr, state: String },
    /// A NOTIFICATION, sent or received.
    Notification { peer: IpAddr, code: u8, subcode: u8 },
    /// Anything else, kept raw.
    Other(Value),
}

/// One received UPDATE.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateRecord {
    /// The neighbour that sent it.
    pub peer: IpAddr,
    /// ExaBGP's receive timestamp (seconds since the epoch).
    pub time: f64,
    /// Announced prefixes with their next hop.
    pub announced: Vec<(String, Option<IpAddr>)>,
    /// Withdrawn prefixes.
    pub withdrawn: Vec<String>,
    /// Path attributes.
    pub attrs: Attrs,
}

/// Path attributes of a received UPDATE.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attrs {
    /// ORIGIN ("igp", "egp", "incomplete").
    pub origin: Option<String>,
    /// AS_PATH.
    pub as_path: Vec<u32>,
    /// MED.
    pub med: Option<u32>,
    /// LOCAL_PREF.
    pub local_pref: Option<u32>,
    /// Communities `asn:value`.
    pub communities: Vec<String>,
    /// Large communities `a:b:c`.
    pub large_communities: Vec<String>,
}

fn u32_of(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|x| u32::try_from(x).ok())
}

fn joined(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|t| t.as_array().into_iter().flatten().map(|x| x.to_string()).collect::<Vec<_>>().join(":"))
        .collect()
}

impl Record {
    /// Interprets one line of ExaBGP's JSON API.
    pub fn from_json(v: Value) -> Record {
        let n = &v["neighbor"];
        let Some(peer) = n["address"]["peer"].as_str().and_then(|a| a.parse::<IpAddr>().ok()) else {
            return Record::Other(v);
        };
        if let Some(state) = n["state"].as_str() {
            return Record::State { peer, state: state.to_string() };
        }
        if let Some(note) = n["message"]["notification"].as_object().or_else(|| n["notification"].as_object())
        {
            let code = note.get("code").and_then(Value::as_u64).unwrap_or(0);
            let subcode = note.get("subcode").and_then(Value::as_u64).unwrap_or(0);
            return Record::Notification {
                peer,
                code: u8::try_from(code).unwrap_or(0),
                subcode: u8::try_from(subcode).unwrap_or(0),
            };
        }
        let msg = &n["message"];
        if let Some(eor) = msg["eor"].as_object() {
            let afi = eor.get("afi").and_then(Value::as_str).unwrap_or("?");
            let safi = eor.get("safi").and_then(Value::as_str).unwrap_or("?");
            return Record::EndOfRib { peer, family: format!("{afi} {safi}") };
        }
        let Some(update) = msg["update"].as_object() else { return Record::Other(v) };
        let a = update.get("attribute").cloned().unwrap_or(Value::Null);
        let attrs = Attrs {
            origin: a["origin"].as_str().map(String::from),
            as_path: a["as-path"].as_array().into_iter().flatten().filter_map(u32_of).collect(),
            med: u32_of(&a["med"]),
            local_pref: u32_of(&a["local-preference"]),
            communities: joined(&a["community"]),
            large_communities: joined(&a["large-community"]),
        };
        let mut rec = UpdateRecord {
            peer,
            time: v["time"].as_f64().unwrap_or(0.0),
            attrs,
            announced: Vec::new(),
            withdrawn: Vec::new(),
        };
        for (_fam, by_nh) in update.get("announce").and_then(Value::as_object).into_iter().flatten() {
            for (nh, nlris) in by_nh.as_object().into_iter().flatten() {
                for nlri in nlris.as_array().into_iter().flatten() {
                    if let Some(p) = nlri["nlri"].as_str().or_else(|| nlri.as_str()) {
                        rec.announced.push((p.to_string(), nh.parse().ok()));
                    }
                }
            }
        }
        for (_fam, nlris) in update.get("withdraw").and_then(Value::as_object).into_iter().flatten() {
            for nlri in nlris.as_array().into_iter().flatten() {
                if let Some(p) = nlri["nlri"].as_str().or_else(|| nlri.as_str()) {
                    rec.withdrawn.push(p.to_string());
                }
            }
        }
        Record::Update(rec)
    }
}

/// The generated exabgp.conf.
pub fn config(neighbors: &[ExaNeighbor], script: &str, record: &str) -> String {
    let mut c = String::new();
    let _ =
        writeln!(c, "process recorder {{\n  run /usr/bin/python3 {script} {record};\n  encoder json;\n}}");
    for n in neighbors {
        let _ = writeln!(c, "neighbor {} {{", n.peer);
        let _ = writeln!(c, "  router-id {};\n  local-address {};", n.router_id, n.local);
        let _ = writeln!(c, "  local-as {};\n  peer-as {};\n  group-updates false;", n.local_as, n.peer_as);
        if n.passive {
            c.push_str("  passive true;\n  listen 179;\n");
        }
        if let Some(pw) = &n.password {
            let _ = writeln!(c, "  md5-password \"{pw}\";");
        }
        if let Some(h) = n.hold_time {
            let _ = writeln!(c, "  hold-time {h};");
        }
        c.push_str("  family {\n    ipv4 unicast;\n    ipv6 unicast;\n  }\n");
        if !n.adj_rib_out {
            c.push_str("  adj-rib-out false;\n");
        }
        c.push_str("  capability {\n    route-refresh enable;\n");
        if let Some(gr) = n.graceful_restart {
            let _ = writeln!(c, "    graceful-restart {gr};");
        }
        c.push_str("  }\n");
        c.push_str("  api {\n    processes [ recorder ];\n    neighbor-changes;\n    receive {\n      parsed;\n      update;\n      notification;\n    }\n  }\n");
        if !n.routes.is_empty() {
            c.push_str("  static {\n");
            for r in &n.routes {
                let _ = write!(c, "    route {}", r.prefix);
                match r.next_hop {
                    Some(nh) => {
                        let _ = write!(c, " next-hop {nh}");
                    }
                    None => c.push_str(" next-hop self"),
                }
                if !r.communities.is_empty() {
                    let _ = write!(c, " community [ {} ]", r.communities.join(" "));
                }
                if !r.large_communities.is_empty() {
                    let _ = write!(c, " large-community [ {} ]", r.large_communities.join(" "));
                }
                if let Some(lp) = r.local_pref {
                    let _ = write!(c, " local-preference {lp}");
                }
                if let Some(m) = r.med {
                    let _ = write!(c, " med {m}");
                }
                c.push_str(";\n");
            }
            c.push_str("  }\n");
        }
        c.push_str("}\n");
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_records_carry_prefixes_and_attributes() {
        let line = r#"{"exabgp":"4.0.1","time":1700000000.5,"type":"update","neighbor":{"address":{"local":"192.0.2.1","peer":"192.0.2.11"},"asn":{"local":64512,"peer":64513},"direction":"receive","message":{"update":{"attribute":{"origin":"igp","as-path":[64513],"med":50,"local-preference":200,"community":[[64512,100],[65535,0]],"large-community":[[64512,1,2]]},"announce":{"ipv4 unicast":{"192.0.2.11":[{"nlri":"203.0.113.10/32"}]}},"withdraw":{"ipv4 unicast":[{"nlri":"203.0.113.11/32"}]}}}}}"#;
        let Record::Update(u) = Record::from_json(serde_json::from_str(line).unwrap()) else {
            panic!("not an update")
        };
        assert_eq!(u.peer.to_string(), "192.0.2.11");
        assert_eq!(u.announced, vec![("203.0.113.10/32".to_string(), Some("192.0.2.11".parse().unwrap()))]);
        assert_eq!(u.withdrawn, vec!["203.0.113.11/32"]);
        assert_eq!(u.attrs.communities, vec!["64512:100", "65535:0"]);
        assert_eq!(u.attrs.large_communities, vec!["64512:1:2"]);
        assert_eq!((u.attrs.med, u.attrs.local_pref), (Some(50), Some(200)));
    }

    #[test]
    fn eor_and_state_records_are_recognised() {
        let eor = r#"{"type":"update","neighbor":{"address":{"local":"192.0.2.1","peer":"192.0.2.11"},"message":{"eor":{"afi":"ipv6","safi":"unicast"}}}}"#;
        assert_eq!(
            Record::from_json(serde_json::from_str(eor).unwrap()),
            Record::EndOfRib { peer: "192.0.2.11".parse().unwrap(), family: "ipv6 unicast".into() }
        );
        let st = r#"{"type":"state","neighbor":{"address":{"local":"192.0.2.1","peer":"192.0.2.11"},"state":"up"}}"#;
        assert!(
            matches!(Record::from_json(serde_json::from_str(st).unwrap()), Record::State { state, .. } if state == "up")
        );
    }
}
