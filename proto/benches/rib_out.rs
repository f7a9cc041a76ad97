//! Prints how long the Adj-RIB-Out takes to diff, pack and encode 100k prefixes.
//! Run with `cargo bench -p ferrolb-proto --bench rib_out`; it reports, it does not judge.
use bytes::BytesMut;
use ferrolb_proto::bgp::fsm::{ConnId, Negotiated};
use ferrolb_proto::bgp::rib_out::{ExportConfig, RibOut};
use ferrolb_proto::bgp::session::Routes;
use ferrolb_proto::bgp::{Community, DecodeContext, EncodeContext, Family, Message, PathAttributes};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let n = 100_000u32;
    // One shared attribute set, as the announcer hands it over.
    let attrs =
        Arc::new(PathAttributes { communities: vec![Community::new(64512, 100)], ..Default::default() });
    let build = Instant::now();
    let mut desired: Routes = (0..n)
        .map(|i| {
            (IpNet::V4(Ipv4Net::new(Ipv4Addr::from(0xc612_0000 + i), 32).unwrap_or_default()), attrs.clone())
        })
        .collect();
    desired.extend((0..n).map(|i| {
        let a = Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i));
        (IpNet::V6(Ipv6Net::new(a, 128).unwrap_or_default()), attrs.clone())
    }));
    println!("build desired map of {} prefixes: {:?}", desired.len(), build.elapsed());

    let mut rib = RibOut::new(ExportConfig {
        local_as: 65001,
        ebgp: true,
        next_hop_v4: Some(Ipv4Addr::new(192, 0, 2, 11)),
        next_hop_v6: Some(Ipv6Addr::from(0x2001_0db8_u128 << 96 | 0x11)),
        next_hop_v6_link_local: None,
    });
    rib.session_up(&Negotiated {
        peer_as: 65002,
        peer_id: Ipv4Addr::new(192, 0, 2, 2),
        hold_time: 90,
        keepalive_time: 30,
        four_octet_as: true,
        families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        route_refresh: true,
        ipv4_over_ipv6: false,
        peer_graceful_restart: None,
        conn: ConnId(1),
    });

    let t = Instant::now();
    let updates = rib.sync(&desired);
    let diff = t.elapsed();
    let t = Instant::now();
    let mut wire = BytesMut::with_capacity(4 << 20);
    for u in &updates {
        Message::Update(u.clone()).encode(&mut wire, &EncodeContext::default());
    }
    let enc = t.elapsed();
    println!(
        "initial sync 100k IPv4 /32 + 100k IPv6 /128: diff+pack {diff:?}, encode {enc:?}, {} UPDATEs, {} bytes",
        updates.len(),
        wire.len()
    );

    let t = Instant::now();
    let mut buf = wire.freeze();
    let mut count = 0;
    while !buf.is_empty() {
        if Message::decode(&mut buf, &DecodeContext::default()).is_err() {
            break;
        }
        count += 1;
    }
    println!("decode {count} UPDATEs: {:?}", t.elapsed());

    let t = Instant::now();
    let none = rib.sync(&desired);
    println!("re-sync unchanged 200k: {:?} ({} UPDATEs)", t.elapsed(), none.len());

    let half: Routes = desired.iter().step_by(2).map(|(p, a)| (*p, a.clone())).collect();
    let t = Instant::now();
    let w = rib.sync(&half);
    println!("withdraw 100k of 200k: {:?} ({} UPDATEs)", t.elapsed(), w.len());
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for line in status.lines().filter(|l| l.starts_with("VmHWM") || l.starts_with("VmRSS")) {
            println!("{line} (whole process, including the desired map)");
        }
    }
}
