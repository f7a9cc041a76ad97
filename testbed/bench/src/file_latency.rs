//! `bench file-latency`: from a static-file edit (rename into place) to the UPDATE
//! arriving at an ExaBGP recorder on r1, by the recorder's receive timestamp.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Summary;
use ferrolb_lab::routers::exabgp::Record;
use ferrolb_lab::routers::{ExaBgp, ExaNeighbor};
use ferrolb_lab::speaker::{self, Speaker, yaml};
use ferrolb_lab::{Error, Lab, LabConfig, addressing};

fn file(ips: &[IpAddr]) -> String {
    yaml::stream(&[
        yaml::node(1),
        yaml::pool("public", &[addressing::BGP_POOL_V4]),
        yaml::service("web", ips),
        yaml::peer(
            "r1",
            addressing::NODE_ASN,
            addressing::ROUTER_ASN,
            addressing::ROUTER_V4.into(),
            &["addressFamilies: [ipv4-unicast]"],
        ),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
    ])
}

/// Measures `trials` edits, each adding one address, and prints min/median/max.
pub fn run(trials: usize) -> Result<(), Error> {
    let bin = speaker::binary("release").or_else(|_| speaker::binary("debug"))?;
    let lab = Lab::up(LabConfig::nodes(1))?;
    let mut rec = ExaNeighbor::to_router(
        addressing::ROUTER_V4.into(),
        addressing::node_v4(1).into(),
        addressing::ROUTER_V4,
    );
    rec.passive = true;
    (rec.local_as, rec.peer_as) = (addressing::ROUTER_ASN, addressing::NODE_ASN);
    let recorder = ExaBgp::start(&lab, lab.router(), "recorder", &[rec])?;
    let mut ips: Vec<IpAddr> = vec![addressing::bgp_vip_v4(1)];
    let sp = Speaker::start_with(&lab, 1, &file(&ips), &bin, &[])?;
    recorder.wait_record("End-of-RIB", Duration::from_secs(60), |r| matches!(r, Record::EndOfRib { .. }))?;
    let mut lat = Vec::new();
    for k in 0..trials {
        let ip = addressing::bgp_vip_v4(u8::try_from(10 + k % 200).unwrap_or(10));
        ips.push(ip);
        let prefix = format!("{ip}/32");
        let written =
            SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| Error::Parse(e.to_string()))?;
        sp.replace_file(&file(&ips))?;
        let r = recorder.wait_record(
            &format!("UPDATE for {prefix}"),
            Duration::from_secs(30),
            |r| matches!(r, Record::Update(u) if u.announced.iter().any(|(p, _)| *p == prefix)),
        )?;
        if let Record::Update(u) = r {
            lat.push(Duration::from_secs_f64((u.time - written.as_secs_f64()).max(0.0)));
        }
        // Let the debounce window pass so edits do not merge.
        std::thread::sleep(Duration::from_millis(300));
    }
    println!("bench file-latency: static-file rename → UPDATE at ExaBGP on r1, {trials} edits");
    if let Some(s) = Summary::of(&lat) {
        println!("ferrolb    {s}");
    }
    Ok(())
}
