//! Membership + election + L2 responder together on two lab nodes: when the owner's
//! node dies (speaker stopped and its link cut, as a power loss), the survivor sees it
//! leave the live set, elects itself and takes the address over with a gratuitous ARP;
//! the client's 10 ms probe stream shows the outage, printed per trial.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use ferrolb_lab::client::{self, ProbeStream};
use ferrolb_lab::runtime::NsRuntime;
use ferrolb_lab::{Lab, LabConfig, addressing, wait};
use ferrolb_proto::election;
use ferrolb_proto::l2::{InterfaceChoice, L2Announcer, L2Config, L2Metrics, L2Status, Owned};
use ferrolb_proto::membership::MembershipKey;
use ferrolb_proto::membership::{DEFAULT_PORT, Membership, MembershipConfig, MembershipMetrics, Seed};
use tokio::sync::watch;

const T: Duration = Duration::from_secs(20);
const KEY: &str = "failover-membership-key-0123456789";
const TRIALS: usize = 3;

fn vip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, 210))
}

/// Starts membership, the announcer and the election loop of node `i` inside its namespace.
fn speaker(lab: &Lab, i: usize, n: usize) -> (watch::Receiver<L2Status>, NsRuntime) {
    let seeds: Vec<Seed> = (1..=n)
        .map(|j| Seed {
            name: addressing::node_name(j),
            addr: SocketAddr::new(addressing::node_v4(j).into(), DEFAULT_PORT),
        })
        .collect();
    let me = addressing::node_name(i);
    let advertise = SocketAddr::new(addressing::node_v4(i).into(), DEFAULT_PORT);
    NsRuntime::start(lab.node(i), move || {
        let l2 = L2Announcer::spawn(L2Config::default(), L2Metrics::default()).unwrap();
        let mut cfg = MembershipConfig::new(&me, advertise, seeds, MembershipKey::parse(KEY).unwrap());
        cfg.bind = advertise;
        let membership = Membership::spawn(cfg, MembershipMetrics::default()).unwrap();
        let status = l2.status();
        let mut live = membership.live();
        let mut settled = membership.settled();
        tokio::spawn(async move {
            let _keep = membership;
            // A starting node sees only itself until it joined: elect from a settled view.
            let _ = settled.wait_for(|s| *s).await;
            loop {
                let members: BTreeSet<String> = live.borrow_and_update().clone();
                let owned: Owned = (election::owner(vip(), members.iter().map(String::as_str))
                    == Some(me.as_str()))
                .then(|| (vip(), InterfaceChoice::Auto))
                .into_iter()
                .collect();
                println!("  {me}: live {members:?}, owns {:?}", owned.keys().collect::<Vec<_>>());
                l2.set_owned(owned);
                if live.changed().await.is_err() {
                    break;
                }
            }
        });
        status
    })
    .unwrap()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn survivor_takes_over_when_the_owner_dies() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    for n in lab.nodes() {
        lab.add_vip_on_lo(n, vip()).unwrap();
    }
    let owner_name = election::owner(vip(), ["node1", "node2"]).unwrap().to_string();
    let owner = if owner_name == "node1" { 1 } else { 2 };
    let survivor = 3 - owner;
    let (survivor_status, _survivor_rt) = speaker(&lab, survivor, 2);
    let mut outages = Vec::new();
    for trial in 1..=TRIALS {
        let (status, owner_rt) = speaker(&lab, owner, 2);
        wait::until_value(
            "the elected owner announced the VIP",
            T,
            || Ok(status.borrow().clone()),
            |s: &L2Status| s.addresses.get(&vip()).is_some_and(|a| a.gratuitous_sent),
        )
        .unwrap();
        // Steady state: the survivor has seen the owner join and let go of the VIP.
        wait::until_value(
            "the survivor not owning the VIP",
            T,
            || Ok(survivor_status.borrow().clone()),
            |s: &L2Status| s.addresses.is_empty(),
        )
        .unwrap();
        let _ = lab.client().exec_output(&["ping", "-c", "1", "-W", "1", &vip().to_string()]);
        client::wait_neighbour_mac(lab.client(), "eth0", vip(), &addressing::node_mac(owner), T).unwrap();

        let probe = ProbeStream::start(lab.client(), vip(), Duration::from_millis(10)).unwrap();
        probe.wait_sent(30, T).unwrap();
        println!("  killing {owner_name}");
        // The owner's node dies: its speaker stops and its link goes down.
        lab.node(owner).ip(&["link", "set", "eth0", "down"]).unwrap();
        owner_rt.stop();
        client::wait_neighbour_mac(lab.client(), "eth0", vip(), &addressing::node_mac(survivor), T).unwrap();
        probe.wait_sent(30, T).unwrap();
        let report = probe.stop(Duration::from_millis(100));
        println!(
            "trial {trial}: owner {owner_name} died; client outage {:?} ({} of {} probes lost)",
            report.max_outage(),
            report.lost(),
            report.sent
        );
        assert!(report.received > 0, "the client reached the VIP through the survivor");
        outages.push(report.max_outage());
        lab.node(owner).ip(&["link", "set", "eth0", "up"]).unwrap();
    }
    println!("failover outage over {TRIALS} trials: median {:?}, all {outages:?}", median(outages.clone()));
}
