//! L2 mode: the VIP on the elected member's interface, answered by ARP/NDP, handed over
//! make before break (see `crate::l2::holder`). When membership splits while
//! the LAN still carries ARP/NDP, both sides hold the VIP: the announcer's conflict
//! detection settles it on the wire and the member that yields takes the VIP off its
//! interface until the other goes silent ([`yielded_on_the_wire`]).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::l2::claims::{Claims, Seen};
use crate::l2::holder::{Event, HANDOVER_WAIT, Holder, Input, Release};
use crate::metrics::Metrics;
use crate::{addr, l2};
use anyhow::{anyhow, bail};
use ferrolb_api::{ControlPlaneVip, ControlPlaneVipMember};
use ferrolb_proto::l2::{
    DEFAULT_TAKEOVER, InterfaceChoice, L2Announcer, L2Config, L2Handle, L2Status, Owned,
};
use ferrolb_proto::membership::{MembershipConfig, Seed};
use ferrolb_proto::time::sleep_until;
use tokio::sync::watch;

use super::RunOptions;
use super::Stop;

pub(super) async fn run_l2(
    a: &RunOptions,
    vip: &ControlPlaneVip,
    ip: IpAddr,
    addrs: &addr::Addresses,
    mut health: watch::Receiver<bool>,
    metrics: &Metrics,
    stop: impl std::future::Future<Output = Stop>,
) -> anyhow::Result<Stop> {
    let ifname = match &vip.spec.interface {
        Some(i) => i.clone(),
        None => addrs.interface_for(ip).await?.ok_or_else(|| {
            anyhow!(
                "ControlPlaneVIP: spec.interface: no interface has a subnet holding {ip}; set spec.interface"
            )
        })?,
    };
    // This process holds nothing yet. An address with our mark is one a predecessor killed
    // before it could release it (SIGKILL, OOM, crash) left behind: the kernel would keep
    // answering ARP/NDP for it beside the elected owner, so it goes now.
    match addrs.release(&ifname, ip).await {
        Ok(true) => {
            tracing::warn!(%ip, interface = %ifname, "removed the VIP a previous run left on the interface")
        }
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "removing a VIP left by a previous run"),
    }
    let (membership, announcer) = start_l2(a, vip, metrics)?;
    let members: Vec<String> = vip.spec.members.iter().map(|m| m.name.clone()).collect();
    let mut holder = Holder::new(&a.node_name, ip, members);
    let claims = watch_claims(addrs, &ifname, ip).await;
    let mut claimed = claims.as_ref().map(Claims::seen);
    let mut live = membership.live_healthy();
    let mut holder_view = BTreeSet::new();
    let mut wire = announcer.status();
    // The announcer answers for the VIP (and probes it for conflicts).
    let mut announcing = false;
    // The VIP is on the interface (or someone else's equal address is).
    let mut on_interface = false;
    let mut released: Option<Release> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    metrics.set_ready(true);
    tokio::pin!(stop);
    let reason;
    loop {
        let timeout = holder.poll_timeout();
        tokio::select! {
            s = &mut stop => { reason = s; break }
            r = health.changed() => {
                if r.is_err() { bail!("the health checker stopped") }
                membership.set_local_health(*health.borrow_and_update());
                continue;
            }
            r = live.changed() => {
                if r.is_err() { bail!("membership stopped") }
                let view = live.borrow_and_update().clone();
                let joined = view.iter().any(|m| *m != a.node_name && !holder_view.contains(m));
                holder_view.clone_from(&view);
                holder.handle(Instant::now(), Input::View(view));
                // Membership hears another member again and still elects this one: a
                // conflict of the split is membership's to settle now (the other hands
                // over once it hears our announcement; see `L2Handle::renew`).
                if joined && holder.elected() == Some(a.node_name.as_str()) && yielded_on_the_wire(&wire.borrow(), ip) {
                    tracing::info!(%ip, "membership elects this member again after a split: answering for the VIP again");
                    announcer.renew();
                }
            }
            Some(seen) = next_claim(&mut claimed) => {
                let by = claimant(addrs, &vip.spec.members, seen.mac).await;
                holder.handle(Instant::now(), Input::Claim { at: seen.at, by });
            }
            r = wire.changed() => {
                if r.is_err() { bail!("the L2 announcer stopped") }
            }
            _ = sleep_until(timeout), if timeout.is_some() => holder.handle(Instant::now(), Input::Timeout),
            // Retries an address change that failed.
            _ = tick.tick() => {}
        }
        let yielded = yielded_on_the_wire(&wire.borrow_and_update(), ip);
        while let Some(event) = holder.poll_event() {
            match event {
                Event::HandingOver { to } => {
                    tracing::info!(%ip, successor = %to, "another member is elected; keeping the VIP until it announces it")
                }
                Event::Released(why) => released = Some(why),
                // A yielded VIP is announced again when the conflict ends (the announcer's).
                Event::Defend if yielded => {}
                Event::Defend => {
                    tracing::info!(%ip, interface = %ifname, "another node announced the VIP; announcing it again");
                    announcer.reannounce();
                }
            }
        }
        // Held, the VIP goes on the interface (the kernel answers for it too) unless
        // another node outranks this one on the wire (see `yielded_on_the_wire`).
        let want = holder.holds() && !yielded;
        if want {
            match addrs.ensure(&ifname, ip, addr::host_len(ip)).await {
                Ok(addr::Ensured::Added) => {
                    let how = if announcing {
                        "took the VIP back after an address conflict"
                    } else {
                        "took the VIP"
                    };
                    tracing::info!(%ip, interface = %ifname, live_healthy = ?*live.borrow(), "{how}");
                }
                Ok(addr::Ensured::Foreign) if !on_interface => {
                    tracing::warn!(%ip, interface = %ifname, "the VIP is on the interface but not ferrolb's; leaving it")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "adding the VIP");
                    continue;
                }
            }
            on_interface = true;
            metrics.vip_owned.set(1);
        }
        if holder.holds() && !announcing {
            // Gratuitous ARP / unsolicited NA burst now, answers while we own it.
            announcer.set_owned(owned(ip, &ifname));
            announcing = true;
        } else if !holder.holds() && announcing {
            announcer.set_owned(Owned::new());
            announcing = false;
        }
        if !want && on_interface {
            match addrs.release(&ifname, ip).await {
                Ok(_) => {
                    let because = if holder.holds() {
                        "another node answers for it and outranks this one on the wire (address conflict)"
                    } else {
                        released.map_or("not elected", Release::as_str)
                    };
                    tracing::info!(%ip, interface = %ifname, live_healthy = ?*live.borrow(), because, "released the VIP");
                    on_interface = false;
                    metrics.vip_owned.set(0);
                }
                Err(e) => tracing::warn!(error = %e, "removing the VIP"),
            }
        }
    }
    // SIGTERM: leave membership first (peers drop us at once and elect a new owner),
    // stop answering, then release only what is ours (release() checks the mark).
    membership.leave().await;
    announcer.shutdown().await;
    if addrs.release(&ifname, ip).await? {
        tracing::info!(%ip, interface = %ifname, "VIP released on shutdown");
    }
    metrics.vip_owned.set(0);
    Ok(reason)
}

/// Watches the VIP's interface for the successor's announcement (make before break, see
/// `l2::holder`); without it a handover ends after `HANDOVER_WAIT`.
async fn watch_claims(addrs: &addr::Addresses, ifname: &str, ip: IpAddr) -> Option<Claims> {
    let watched = match addrs.link(ifname).await {
        Ok((index, Some(mac))) => Claims::watch(index, mac, ip).map_err(|e| e.to_string()),
        Ok((_, None)) => Err("the interface has no MAC address".into()),
        Err(e) => Err(e.to_string()),
    };
    watched
        .inspect_err(|e| {
            tracing::warn!(
                interface = %ifname, error = %e, wait = ?HANDOVER_WAIT,
                "cannot watch for other members announcing the VIP; a handover keeps the VIP for the wait instead"
            )
        })
        .ok()
}

/// The member whose MAC another node announced the VIP with, from the neighbour table
/// (members talk membership, so their addresses are there). None: not known.
async fn claimant(
    addrs: &addr::Addresses,
    members: &[ControlPlaneVipMember],
    mac: [u8; 6],
) -> Option<String> {
    let at = addrs
        .neighbours_at(mac)
        .await
        .inspect_err(|e| tracing::debug!(error = %e, "looking up who announced the VIP"))
        .ok()?;
    members
        .iter()
        .find(|m| m.address.parse::<IpAddr>().is_ok_and(|a| at.contains(&a)))
        .map(|m| m.name.clone())
}

/// The next announcement of the VIP by another node (never, without a watch).
async fn next_claim(claimed: &mut Option<watch::Receiver<Option<Seen>>>) -> Option<Seen> {
    if let Some(rx) = claimed
        && rx.changed().await.is_ok()
    {
        return *rx.borrow_and_update();
    }
    std::future::pending().await
}

/// Whether the announcer yielded `ip` to another node that answers for it and outranks
/// this one (`ferrolb_proto::l2::conflict`): membership between the two is split while
/// the LAN still carries ARP/NDP. The holder still holds it, but the address leaves the
/// interface, or the kernel would go on answering beside the other node; it comes back
/// when the other node has been silent for a moment (it died, or membership healed).
fn yielded_on_the_wire(status: &L2Status, ip: IpAddr) -> bool {
    status.addresses.get(&ip).and_then(|a| a.conflict).is_some_and(|c| !c.won)
}

fn owned(ip: IpAddr, ifname: &str) -> Owned {
    Owned::from([(ip, InterfaceChoice::Named(BTreeSet::from([ifname.to_string()])))])
}

/// Reads the membership key (and keeps following its file, so a changed key rotates
/// without a split) and starts membership (seeded with `spec.members` on
/// `spec.membershipPort`) and the ARP/NDP announcer for the VIP's interface.
fn start_l2(
    a: &RunOptions,
    vip: &ControlPlaneVip,
    metrics: &Metrics,
) -> anyhow::Result<(l2::SwimMembership, L2Handle)> {
    let spec = &vip.spec;
    let key_file = &spec.membership_key_file;
    let text = std::fs::read_to_string(key_file).map_err(|e| {
        anyhow!(
            "ControlPlaneVIP: spec.membershipKeyFile: {key_file}: cannot read: {e}; fix: write the members' shared key (at least 32 characters) into it, the same file on every member"
        )
    })?;
    let key = ferrolb_proto::membership::MembershipKey::parse(&text).map_err(|e| {
        anyhow!(
            "ControlPlaneVIP: spec.membershipKeyFile: {key_file}: {e}; fix: write the members' shared key (at least 32 characters) into it"
        )
    })?;
    let port = spec.membership_port;
    let mut seeds = Vec::new();
    let mut advertise = None;
    for m in &spec.members {
        let ip: IpAddr = m.address.parse().map_err(|_| {
            anyhow!("ControlPlaneVIP: spec.members: {}: address {:?} is not an IP address; fix: write the node's address", m.name, m.address)
        })?;
        let addr = SocketAddr::new(ip, port);
        if m.name == a.node_name {
            advertise = Some(addr);
        } else {
            seeds.push(Seed { name: m.name.clone(), addr });
        }
    }
    let advertise = advertise.ok_or_else(|| {
        anyhow!(
            "ControlPlaneVIP: spec.members: node {} is not listed; add it or fix --node-name",
            a.node_name
        )
    })?;
    let mut cfg = MembershipConfig::new(&a.node_name, advertise, seeds, key);
    cfg.bind = SocketAddr::new(advertise.ip(), port);
    // The shipped window (the labs shorten it in debug builds, as for the speaker).
    cfg.rotation_window = ferrolb_proto::membership::rotation_window();
    let membership = l2::SwimMembership::start_with_key_file(cfg, metrics.membership.clone(), key_file)
        .map_err(|e| anyhow!("ControlPlaneVIP: spec.membershipPort: membership cannot start: {e}"))?;
    let l2cfg = L2Config { allowed_interfaces: None, takeover: DEFAULT_TAKEOVER.to_vec() };
    let announcer = L2Announcer::spawn(l2cfg, metrics.l2.clone())
        .map_err(|e| anyhow!("L2 announcer cannot start (needs NET_RAW): {e}"))?;
    tracing::info!(advertise = %advertise, "membership started (health carried in the member name)");
    Ok((membership, announcer))
}
