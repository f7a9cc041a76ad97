//! Adj-RIB-Out: diffing, packing into 4096-byte UPDATEs, End-of-RIB, export rewrites.
use crate::bgp::fsm::{ConnId, Negotiated};
use crate::bgp::rib_out::{ExportConfig, RibOut};
use crate::bgp::session::Routes;
use crate::bgp::*;
use imbl::ordmap::DiffItem;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

fn negotiated(families: Vec<Family>, four_octet_as: bool) -> Negotiated {
    Negotiated {
        peer_as: 65002,
        peer_id: Ipv4Addr::new(192, 0, 2, 2),
        hold_time: 90,
        keepalive_time: 30,
        four_octet_as,
        families,
        route_refresh: true,
        ipv4_over_ipv6: false,
        peer_graceful_restart: None,
        conn: ConnId(1),
    }
}

fn export(local_as: u32, ebgp: bool) -> ExportConfig {
    ExportConfig {
        local_as,
        ebgp,
        next_hop_v4: Some(Ipv4Addr::new(192, 0, 2, 11)),
        next_hop_v6: Some("2001:db8::11".parse().expect("addr")),
        next_hop_v6_link_local: None,
    }
}

fn up_rib(ebgp: bool) -> RibOut {
    let mut r = RibOut::new(export(65001, ebgp));
    r.session_up(&negotiated(vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST], true));
    r
}

fn attrs() -> Arc<PathAttributes> {
    Arc::new(base())
}

fn base() -> PathAttributes {
    PathAttributes { communities: vec![Community::new(64512, 100)], ..Default::default() }
}

fn v4_hosts(n: u32) -> impl Iterator<Item = IpNet> {
    // 198.18.0.0/15 is the benchmarking range.
    (0..n).map(|i| IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0xc612_0000 + i), 32).expect("len")))
}

fn v6_hosts(n: u32) -> impl Iterator<Item = IpNet> {
    (0..n).map(|i| {
        IpNet::V6(Ipv6Net::new(Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i)), 128).expect("len"))
    })
}

/// Encodes each UPDATE, checks it fits and decodes to itself, and collects what it carries.
fn wire_check(updates: &[Update]) -> (BTreeSet<IpNet>, BTreeSet<IpNet>, Vec<Family>) {
    let (mut ann, mut wd, mut eor) = (BTreeSet::new(), BTreeSet::new(), Vec::new());
    for u in updates {
        let m = Message::Update(u.clone());
        let b = m.to_bytes(&EncodeContext::default());
        assert!(b.len() <= 4096, "UPDATE of {} bytes", b.len());
        assert_eq!(Message::decode(&mut b.clone(), &DecodeContext::default()), Ok(m));
        if let Some(f) = u.end_of_rib_family() {
            eor.push(f);
        }
        for p in u.announced() {
            assert!(ann.insert(p), "{p} announced twice");
        }
        for p in u.withdrawn_prefixes() {
            assert!(wd.insert(p), "{p} withdrawn twice");
        }
    }
    (ann, wd, eor)
}

#[test]
fn ten_thousand_v4_prefixes_pack_into_few_updates() {
    let mut r = up_rib(true);
    let desired: Routes = v4_hosts(10_000).map(|p| (p, attrs())).collect();
    let updates = r.sync(&desired);
    let (ann, wd, eor) = wire_check(&updates);
    assert_eq!(ann.len(), 10_000);
    assert!(wd.is_empty());
    assert_eq!(eor, vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST], "EoR per family, last");
    // Attributes: ORIGIN 4 + AS_PATH 9 + NEXT_HOP 7 + COMMUNITIES 7 = 27 bytes, so
    // (4096 - 23 - 27) / 5 = 809 prefixes per UPDATE: 13 UPDATEs.
    assert_eq!(updates.len() - eor.len(), 13);
    assert_eq!(r.advertised(), 10_000);
    // Nothing changed: nothing to send, no second EoR.
    assert!(r.sync(&desired).is_empty());
}

#[test]
fn ipv6_goes_in_mp_reach_with_the_v6_next_hop() {
    let mut r = up_rib(true);
    let desired: Routes = v6_hosts(1000).map(|p| (p, attrs())).collect();
    let updates = r.sync(&desired);
    let (ann, _, _) = wire_check(&updates);
    assert_eq!(ann.len(), 1000);
    let first = &updates[0];
    assert!(first.nlri.is_empty());
    assert_eq!(first.attributes.next_hop, None, "no IPv4 NEXT_HOP on IPv6 routes");
    let mp = first.attributes.mp_reach.as_ref().expect("MP_REACH");
    assert_eq!(
        mp.next_hop,
        MpNextHop::V6 { global: "2001:db8::11".parse().expect("addr"), link_local: None }
    );
    // (4096 - 23 - 20 - 25) / 17 = 236 per UPDATE.
    assert_eq!(updates.len() - 2, 1000usize.div_ceil(236));
}

/// Unnumbered peering (RFC 8950): no IPv4 next hop to give, so IPv4 routes go in
/// MP_REACH with the IPv6 next hop, only when the peer accepted the capability; an IPv4
/// next hop, when there is one, is still preferred.
#[test]
fn ipv4_routes_take_an_ipv6_next_hop_only_where_negotiated() {
    let ll: Ipv6Addr = "fe80::11".parse().expect("addr");
    let unnumbered = ExportConfig {
        next_hop_v4: None,
        next_hop_v6: Some(ll),
        next_hop_v6_link_local: None,
        ..export(65001, true)
    };
    let desired: Routes = v4_hosts(2000).map(|p| (p, attrs())).collect();
    let both = vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST];

    let mut r = RibOut::new(unnumbered.clone());
    r.session_up(&Negotiated { ipv4_over_ipv6: true, ..negotiated(both.clone(), true) });
    let updates = r.sync(&desired);
    let (ann, _, eor) = wire_check(&updates);
    assert_eq!(ann.len(), 2000);
    assert_eq!(eor, both);
    for u in updates.iter().filter(|u| u.end_of_rib_family().is_none()) {
        assert!(u.nlri.is_empty(), "IPv4 prefixes in the classic NLRI field");
        assert_eq!(u.attributes.next_hop, None);
        let mp = u.attributes.mp_reach.as_ref().expect("MP_REACH");
        assert_eq!(mp.family, Family::IPV4_UNICAST);
        assert_eq!(mp.next_hop, MpNextHop::V6 { global: ll, link_local: None });
    }
    // Withdrawn the classic way: a withdrawal carries no next hop.
    let (_, wd, _) = wire_check(&r.sync(&Routes::new()));
    assert_eq!(wd.len(), 2000);

    // Not negotiated: nothing IPv4 can be sent (End-of-RIB only).
    let mut r = RibOut::new(unnumbered);
    r.session_up(&negotiated(both.clone(), true));
    let (ann, _, _) = wire_check(&r.sync(&desired));
    assert!(ann.is_empty(), "IPv4 routes without a next hop the peer can take");

    // Negotiated on a numbered session: the IPv4 next hop still rules.
    let mut r = RibOut::new(export(65001, true));
    r.session_up(&Negotiated { ipv4_over_ipv6: true, ..negotiated(both, true) });
    let updates = r.sync(&desired);
    assert!(updates.iter().all(|u| u.attributes.mp_reach.is_none()));
    assert_eq!(updates[0].attributes.next_hop, Some(Ipv4Addr::new(192, 0, 2, 11)));
}

#[test]
fn withdrawals_and_changes_are_minimal() {
    let mut r = up_rib(true);
    let mut desired: Routes = v4_hosts(5000).chain(v6_hosts(500)).map(|p| (p, attrs())).collect();
    r.sync(&desired);
    // Withdraw 3000 v4 and 200 v6; change the attributes of 10 v4 prefixes.
    let gone: Vec<IpNet> = v4_hosts(3000).chain(v6_hosts(200)).collect();
    for p in &gone {
        desired.remove(p);
    }
    let changed: Vec<IpNet> = v4_hosts(3010).skip(3000).collect();
    for p in &changed {
        desired.insert(*p, Arc::new(PathAttributes { med: Some(10), ..base() }));
    }
    let updates = r.sync(&desired);
    let (ann, wd, eor) = wire_check(&updates);
    assert!(eor.is_empty(), "EoR only after the initial table");
    assert_eq!(wd, gone.iter().copied().collect());
    assert_eq!(ann, changed.iter().copied().collect());
    assert_eq!(updates.iter().filter(|u| !u.nlri.is_empty()).count(), 1);
    // 3000 × 5 bytes over (4096 - 23) per UPDATE = 4 UPDATEs; 200 × 17 in MP_UNREACH = 1.
    assert_eq!(updates.iter().filter(|u| !u.withdrawn.is_empty()).count(), 4);
    assert_eq!(updates.iter().filter(|u| u.attributes.mp_unreach.is_some()).count(), 1);
    assert_eq!(r.advertised(), 2000 + 300);
}

#[test]
fn session_restart_resends_the_full_table_and_eor() {
    let mut r = up_rib(true);
    let desired: Routes = v4_hosts(100).map(|p| (p, attrs())).collect();
    r.sync(&desired);
    r.session_down();
    assert!(r.sync(&desired).is_empty(), "nothing while down");
    r.session_up(&negotiated(vec![Family::IPV4_UNICAST], true));
    let (ann, _, eor) = wire_check(&r.sync(&desired));
    assert_eq!(ann.len(), 100);
    assert_eq!(eor, vec![Family::IPV4_UNICAST]);
}

#[test]
fn unnegotiated_families_are_not_sent() {
    let mut r = RibOut::new(export(65001, true));
    r.session_up(&negotiated(vec![Family::IPV4_UNICAST], true));
    let desired: Routes = v4_hosts(3).chain(v6_hosts(3)).map(|p| (p, attrs())).collect();
    let (ann, _, _) = wire_check(&r.sync(&desired));
    assert_eq!(ann, v4_hosts(3).collect());
}

#[test]
fn export_rewrites_for_ebgp_and_ibgp() {
    let desired: Routes =
        v4_hosts(1).map(|p| (p, Arc::new(PathAttributes { local_pref: Some(200), ..base() }))).collect();
    let mut e = up_rib(true);
    let u = &e.sync(&desired)[0];
    assert_eq!(u.attributes.as_path, Some(AsPath::sequence(vec![65001])));
    assert_eq!(u.attributes.local_pref, None, "LOCAL_PREF is not sent to eBGP peers");
    assert_eq!(u.attributes.origin, Some(Origin::Igp));
    assert_eq!(u.attributes.next_hop, Some(Ipv4Addr::new(192, 0, 2, 11)));

    let mut i = up_rib(false);
    let u = &i.sync(&desired)[0];
    assert_eq!(u.attributes.as_path, Some(AsPath::default()), "iBGP: empty AS_PATH");
    assert_eq!(u.attributes.local_pref, Some(200));
}

#[test]
fn four_octet_as_towards_two_octet_peer_adds_as4_path() {
    let mut r = RibOut::new(export(4_200_000_000, true));
    r.session_up(&negotiated(vec![Family::IPV4_UNICAST], false));
    let desired: Routes = v4_hosts(1).map(|p| (p, attrs())).collect();
    let u = &r.sync(&desired)[0];
    assert_eq!(u.attributes.as4_path, Some(AsPath::sequence(vec![4_200_000_000])));
    let b = Message::Update(u.clone()).to_bytes(&EncodeContext { four_octet_as: false });
    assert!(b.len() <= 4096);
    let Ok(Message::Update(d)) = Message::decode(&mut b.clone(), &DecodeContext { four_octet_as: false })
    else {
        panic!("decode")
    };
    assert_eq!(d.attributes.effective_as_path(), Some(AsPath::sequence(vec![4_200_000_000])));
}

#[test]
fn route_refresh_resends_one_family() {
    let mut r = up_rib(true);
    let desired: Routes = v4_hosts(10).chain(v6_hosts(10)).map(|p| (p, attrs())).collect();
    r.sync(&desired);
    r.refresh(Family::IPV6_UNICAST);
    let (ann, _, _) = wire_check(&r.sync(&desired));
    assert_eq!(ann, v6_hosts(10).collect());
}

proptest::proptest! {
    /// Syncing only the prefixes that changed since the last sync sends what a sync of
    /// the whole set sends, step after step (new routes, withdrawn ones, new attributes).
    #[test]
    fn syncing_the_changes_only_equals_syncing_everything(
        steps in proptest::collection::vec(proptest::collection::btree_map(0u32..40, 0u8..3, 0..30), 1..8)
    ) {
        let sets: Vec<Arc<PathAttributes>> = (0..3u16)
            .map(|i| Arc::new(PathAttributes { local_pref: Some(100 + u32::from(i)), ..base() }))
            .collect();
        let (mut whole, mut part) = (up_rib(true), up_rib(true));
        let mut last = Routes::new();
        for step in steps {
            let hosts: Vec<IpNet> = v4_hosts(40).collect();
            let routes: Routes =
                step.iter().map(|(h, a)| (hosts[*h as usize], sets[*a as usize].clone())).collect();
            let mut changed = BTreeSet::new();
            for d in last.diff(&routes) {
                changed.insert(match d {
                    DiffItem::Add(p, _) | DiffItem::Remove(p, _) | DiffItem::Update { new: (p, _), .. } => *p,
                });
            }
            let (a, b) = (whole.sync(&routes), part.sync_changed(&routes, &changed));
            let (a, b) = (wire_check(&a), wire_check(&b));
            proptest::prop_assert_eq!(&a.0, &b.0, "announced");
            proptest::prop_assert_eq!(&a.1, &b.1, "withdrawn");
            let sent = |r: &RibOut| r.advertised_prefixes().iter().copied().collect::<BTreeSet<IpNet>>();
            proptest::prop_assert_eq!(sent(&whole), sent(&part));
            // The published set follows what was sent, prefix for prefix.
            proptest::prop_assert_eq!(whole.advertised_prefixes().len(), whole.advertised());
            proptest::prop_assert_eq!(part.advertised_prefixes().len(), part.advertised());
            last = routes;
        }
    }
}
