//! A lab: one L2 segment joining a router, N nodes and a client, plus a routed link.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Error;
use crate::addressing;
use crate::netns::{self, Netns};
use crate::process::{Proc, Spawn, read_lossy, tail};

pub use crate::BASE_DIR;

static NEXT_LAB: AtomicU32 = AtomicU32::new(0);

/// What to build.
#[derive(Debug, Clone)]
pub struct LabConfig {
    /// Number of nodes on the segment (1..=9).
    pub nodes: usize,
    /// Outlive this process (`ferrolb-testbed up`): no teardown on drop, processes
    /// not tied to the parent. Such labs are never treated as stale.
    pub persistent: bool,
    /// On-link clients besides the client (0..=9): hosts on the LAN with no route
    /// through r1, reaching service addresses by ARP/NDP ([`Lab::lan_clients`]).
    pub lan_clients: usize,
}

impl Default for LabConfig {
    fn default() -> Self {
        LabConfig { nodes: 2, persistent: false, lan_clients: 0 }
    }
}

impl LabConfig {
    /// A lab with `n` nodes.
    pub fn nodes(n: usize) -> Self {
        LabConfig { nodes: n, ..Default::default() }
    }

    /// With `n` on-link clients besides the client.
    pub fn lan_clients(self, n: usize) -> Self {
        LabConfig { lan_clients: n, ..self }
    }
}

/// A running lab; tears itself down (processes, namespaces) when dropped, and prints
/// every process log when dropped during a panic.
#[derive(Debug)]
pub struct Lab {
    id: String,
    dir: PathBuf,
    switch: Netns,
    router: Netns,
    client: Netns,
    nodes: Vec<Netns>,
    lan_clients: Vec<Netns>,
    persistent: bool,
    torn_down: bool,
}

impl Lab {
    /// Builds the topology of [`addressing`]. Fails with [`Error::Missing`] when not root or
    /// when network namespaces are unavailable.
    pub fn up(cfg: LabConfig) -> Result<Lab, Error> {
        check_prerequisites()?;
        if cfg.nodes == 0 || cfg.nodes > addressing::MAX_NODES {
            return Err(Error::Missing(format!("a lab has 1..={} nodes", addressing::MAX_NODES)));
        }
        if cfg.lan_clients > addressing::MAX_LAN_CLIENTS {
            return Err(Error::Missing(format!(
                "a lab has 0..={} on-link clients",
                addressing::MAX_LAN_CLIENTS
            )));
        }
        let id = if cfg.persistent {
            // pid 0 marks a lab that no process owns; the clock keeps ids apart.
            let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
            format!("{}0x{}", netns::PREFIX, t % 1_000_000_000)
        } else {
            format!("{}{}x{}", netns::PREFIX, std::process::id(), NEXT_LAB.fetch_add(1, Ordering::Relaxed))
        };
        let dir = Path::new(BASE_DIR).join(&id);
        std::fs::create_dir_all(&dir)?;
        let mut lab = Lab {
            switch: Netns::existing(&format!("{id}-sw")),
            router: Netns::existing(&format!("{id}-r1")),
            client: Netns::existing(&format!("{id}-client")),
            nodes: (1..=cfg.nodes).map(|i| Netns::existing(&format!("{id}-node{i}"))).collect(),
            lan_clients: (1..=cfg.lan_clients).map(|k| Netns::existing(&format!("{id}-lan{k}"))).collect(),
            id,
            dir,
            persistent: cfg.persistent,
            torn_down: false,
        };
        // On any error below, dropping `lab` removes what was made so far.
        lab.build()?;
        Ok(lab)
    }

    fn build(&mut self) -> Result<(), Error> {
        for ns in self.all() {
            Netns::create(ns.name())?;
            // Addresses must be usable at once: no duplicate address detection.
            ns.sysctl("net.ipv6.conf.all.accept_dad", "0")?;
            ns.sysctl("net.ipv6.conf.default.accept_dad", "0")?;
            ns.sysctl("net.ipv4.conf.all.rp_filter", "0")?;
            ns.sysctl("net.ipv4.conf.default.rp_filter", "0")?;
        }
        let sw = &self.switch;
        sw.ip(&["link", "add", "br0", "type", "bridge", "mcast_snooping", "0", "stp_state", "0"])?;
        sw.ip(&["link", "set", "br0", "up"])?;

        let r = &self.router;
        attach(sw, r, "r1", addressing::ROUTER_MAC)?;
        addr(r, "eth0", &addressing::ROUTER_V4.into(), 24)?;
        addr(r, "eth0", &addressing::ROUTER_V6.into(), 64)?;
        r.sysctl("net.ipv4.ip_forward", "1")?;
        r.sysctl("net.ipv6.conf.all.forwarding", "1")?;

        for (i, node) in self.nodes.iter().enumerate() {
            let n = i + 1;
            attach(sw, node, &format!("n{n}"), &addressing::node_mac(n))?;
            addr(node, "eth0", &addressing::node_v4(n).into(), 24)?;
            addr(node, "eth0", &addressing::node_v6(n).into(), 64)?;
            // As kube-proxy makes a node: VIPs on `lo` are not answered for by ARP.
            node.sysctl("net.ipv4.conf.all.arp_ignore", "1")?;
            node.sysctl("net.ipv4.conf.all.arp_announce", "2")?;
            node.ip(&["route", "add", addressing::LINK_V4, "via", &addressing::ROUTER_V4.to_string()])?;
            node.ip(&["-6", "route", "add", addressing::LINK_V6, "via", &addressing::ROUTER_V6.to_string()])?;
        }

        for (k, lan) in self.lan_clients.iter().enumerate() {
            let k = k + 1;
            attach(sw, lan, &format!("l{k}"), &addressing::lan_client_mac(k))?;
            addr(lan, "eth0", &addressing::lan_client_v4(k).into(), 24)?;
            addr(lan, "eth0", &addressing::lan_client_v6(k).into(), 64)?;
        }

        let c = &self.client;
        attach(sw, c, "c", addressing::CLIENT_MAC)?;
        addr(c, "eth0", &addressing::CLIENT_V4.into(), 24)?;
        addr(c, "eth0", &addressing::CLIENT_V6.into(), 64)?;
        // The routed link: created in r1, its peer end moved straight into the client.
        r.ip(&[
            "link",
            "add",
            "eth1",
            "address",
            addressing::ROUTER_LINK_MAC,
            "type",
            "veth",
            "peer",
            "name",
            "eth1",
            "address",
            addressing::CLIENT_LINK_MAC,
            "netns",
            c.name(),
        ])?;
        for (ns, a4, a6) in [
            (r, addressing::ROUTER_LINK_V4, addressing::ROUTER_LINK_V6),
            (c, addressing::CLIENT_LINK_V4, addressing::CLIENT_LINK_V6),
        ] {
            addr(ns, "eth1", &a4.into(), 24)?;
            addr(ns, "eth1", &a6.into(), 64)?;
            ns.ip(&["link", "set", "eth1", "up"])?;
        }
        let via4 = addressing::ROUTER_LINK_V4.to_string();
        for dst in [addressing::BGP_POOL_V4, addressing::BULK_V4] {
            c.ip(&["route", "add", dst, "via", &via4])?;
        }
        c.ip(&[
            "-6",
            "route",
            "add",
            addressing::BGP_POOL_V6,
            "via",
            &addressing::ROUTER_LINK_V6.to_string(),
        ])?;
        // Unprivileged-style ICMP echo sockets for the probe stream.
        c.sysctl("net.ipv4.ping_group_range", "0 2147483647")?;
        Ok(())
    }

    /// The lab's id, the prefix of all its namespace names.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The lab's directory (configs, sockets, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A fresh sub-directory of the lab directory.
    pub fn subdir(&self, name: &str) -> Result<PathBuf, Error> {
        let d = self.dir.join(name);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }

    /// The router namespace (r1).
    pub fn router(&self) -> &Netns {
        &self.router
    }

    /// The client namespace.
    pub fn client(&self) -> &Netns {
        &self.client
    }

    /// The switch namespace holding the bridge.
    pub fn switch(&self) -> &Netns {
        &self.switch
    }

    /// Node `i`, 1-based.
    pub fn node(&self, i: usize) -> &Netns {
        &self.nodes[i.clamp(1, self.nodes.len()) - 1]
    }

    /// All nodes, in order.
    pub fn nodes(&self) -> &[Netns] {
        &self.nodes
    }

    /// The on-link clients ([`LabConfig::lan_clients`]), in order: `lan1`, `lan2`, …
    pub fn lan_clients(&self) -> &[Netns] {
        &self.lan_clients
    }

    /// Every namespace of the lab.
    pub fn all(&self) -> Vec<&Netns> {
        let mut v = vec![&self.switch, &self.router, &self.client];
        v.extend(self.nodes.iter());
        v.extend(self.lan_clients.iter());
        v
    }

    /// Starts a supervised process in `ns`; its log goes to the lab directory.
    pub fn spawn(&self, ns: &Netns, mut spec: Spawn) -> Result<Proc, Error> {
        spec.die_with_parent = spec.die_with_parent && !self.persistent;
        Proc::start(ns, &self.dir, &spec)
    }

    /// Adds `addr` to `lo` of `ns` (a VIP as kube-proxy would place it).
    pub fn add_vip_on_lo(&self, ns: &Netns, vip: IpAddr) -> Result<(), Error> {
        addr(ns, "lo", &vip, if vip.is_ipv4() { 32 } else { 128 })
    }

    /// The MACs answering ARP for `addr` on the LAN, asked `count` times from the client.
    pub fn arp_answers(&self, addr: IpAddr, count: u32) -> Result<std::collections::BTreeSet<String>, Error> {
        crate::client::arp_responders(self.client(), "eth0", addr, count)
    }

    /// The link-layer addresses answering NDP for `addr` on the LAN, asked from the client.
    pub fn ndp_answers(&self, addr: IpAddr) -> Result<std::collections::BTreeSet<String>, Error> {
        crate::client::ndp_responders(self.client(), "eth0", addr)
    }

    /// The last lines of every log in the lab directory.
    pub fn logs(&self, lines: usize) -> String {
        let mut out = String::new();
        let mut paths: Vec<PathBuf> = walk_logs(&self.dir);
        paths.sort();
        for p in paths {
            let text = read_lossy(&p);
            out.push_str(&format!("----- {} -----\n{}\n", p.display(), tail(&text, lines)));
        }
        out
    }

    /// Kills every process in the lab and deletes its namespaces. Idempotent.
    pub fn teardown(&mut self) -> Result<(), Error> {
        if self.torn_down {
            return Ok(());
        }
        let mut first_err = None;
        for ns in self.all() {
            if let Err(e) = ns.delete() {
                first_err.get_or_insert(e);
            }
        }
        self.torn_down = true;
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.persistent {
            return;
        }
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!("lab {} failed; logs follow (kept in {})", self.id, self.dir.display());
            eprintln!("{}", self.logs(60));
        }
        if let Err(e) = self.teardown() {
            eprintln!("lab {}: teardown: {e}", self.id);
        }
        if !panicking {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn walk_logs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_logs(&p));
        } else if p.extension().is_some_and(|x| x == "log") {
            out.push(p);
        }
    }
    out
}

/// Connects `member` to the bridge with a veth pair: `eth0` in the member, `port` in the switch.
fn attach(sw: &Netns, member: &Netns, port: &str, mac: &str) -> Result<(), Error> {
    member.ip(&[
        "link",
        "add",
        "eth0",
        "address",
        mac,
        "type",
        "veth",
        "peer",
        "name",
        port,
        "netns",
        sw.name(),
    ])?;
    sw.ip(&["link", "set", port, "master", "br0", "up"])?;
    member.ip(&["link", "set", "eth0", "up"])?;
    Ok(())
}

fn addr(ns: &Netns, dev: &str, a: &IpAddr, len: u8) -> Result<(), Error> {
    let cidr = format!("{a}/{len}");
    if a.is_ipv6() {
        ns.ip(&["-6", "addr", "add", &cidr, "dev", dev, "nodad"])?;
    } else {
        ns.ip(&["addr", "add", &cidr, "dev", dev])?;
    }
    Ok(())
}

/// Fails with one clear line when the lab cannot run here.
pub fn check_prerequisites() -> Result<(), Error> {
    if !nix::unistd::geteuid().is_root() {
        return Err(Error::Missing("the testbed needs root (network namespaces, raw sockets)".into()));
    }
    if netns::run(std::process::Command::new("ip").args(["netns", "list"])).is_err() {
        return Err(Error::Missing(
            "`ip netns` does not work: install iproute2 and enable network namespaces".into(),
        ));
    }
    Ok(())
}

/// Removes leftover labs: all of ours (`all`), or only those whose owning process is
/// gone. Returns the namespaces removed. What a real node leaves beside its namespace
/// (mounts, cgroups) is the cluster's to clean: `ferrolb_cluster::remove_leftovers`.
pub fn remove_leftovers(all: bool) -> Result<Vec<String>, Error> {
    let mut removed = Vec::new();
    for name in netns::list_ours() {
        let Some((pid, _)) = netns::parse_owner(&name) else { continue };
        let stale = pid != 0 && !netns::pid_alive(pid);
        if all || stale {
            netns::delete_by_name(&name)?;
            removed.push(name);
        }
    }
    Ok(removed)
}
