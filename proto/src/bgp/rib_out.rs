//! Per-peer Adj-RIB-Out (RFC 4271 §3.2): diffs the desired routes against what the
//! peer was sent and packs the difference into as few UPDATEs as fit in 4096 bytes.
use super::attributes::{MpNextHop, MpReach, MpUnreach, Origin, PathAttributes};
use super::fsm::Negotiated;
use super::message::{HEADER_LEN, MAX_MESSAGE_LEN, Update};
use super::nlri::{Family, prefix_wire_len};
use super::session::{Prefixes, Routes};
use bytes::BytesMut;
use ipnet::IpNet;
use std::collections::{BTreeSet, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// Fixed part of an UPDATE: header, withdrawn length, attribute length.
const UPDATE_FIXED: usize = HEADER_LEN + 4;

/// How routes are rewritten on their way to this peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// Our AS, prepended to AS_PATH towards eBGP peers.
    pub local_as: u32,
    /// The peer is in another AS: prepend our AS, drop LOCAL_PREF.
    pub ebgp: bool,
    /// NEXT_HOP for IPv4 routes whose attributes carry none.
    pub next_hop_v4: Option<Ipv4Addr>,
    /// Global IPv6 next hop; IPv6 routes are not sent without one.
    pub next_hop_v6: Option<Ipv6Addr>,
    /// Link-local IPv6 next hop, sent with the global one when the peer is on-link (RFC 2545 §3).
    pub next_hop_v6_link_local: Option<Ipv6Addr>,
}

/// The routes a peer has been sent, and the machinery to bring it to a new desired set.
#[derive(Debug)]
pub struct RibOut {
    export: ExportConfig,
    families: Vec<Family>,
    four_octet: bool,
    /// IPv4 routes may go with an IPv6 next hop (RFC 8950 negotiated).
    ipv4_over_ipv6: bool,
    up: bool,
    eor_pending: bool,
    sent: HashMap<IpNet, Arc<PathAttributes>>,
    /// The keys of `sent`, kept beside it as a persistent set: the driver publishes a copy
    /// of it after each sync for the cost of a pointer.
    advertised: Prefixes,
}

impl RibOut {
    /// An empty RIB-Out for a session that is not up yet.
    pub fn new(export: ExportConfig) -> Self {
        Self {
            export,
            families: Vec::new(),
            four_octet: true,
            ipv4_over_ipv6: false,
            up: false,
            eor_pending: false,
            sent: HashMap::new(),
            advertised: Prefixes::new(),
        }
    }

    /// Replaces the export settings (e.g. next hops learned from the connection).
    pub fn set_export(&mut self, export: ExportConfig) {
        self.export = export;
    }

    /// Starts a fresh session: nothing sent yet; End-of-RIB follows the first sync.
    pub fn session_up(&mut self, negotiated: &Negotiated) {
        self.families = negotiated.families.clone();
        self.four_octet = negotiated.four_octet_as;
        self.ipv4_over_ipv6 = negotiated.ipv4_over_ipv6;
        self.sent.clear();
        self.advertised = Prefixes::new();
        self.up = true;
        self.eor_pending = true;
    }

    /// Forgets everything: the peer dropped our routes with the session.
    pub fn session_down(&mut self) {
        self.sent.clear();
        self.advertised = Prefixes::new();
        self.up = false;
        self.eor_pending = false;
    }

    /// Prefixes currently advertised to the peer.
    pub fn advertised(&self) -> usize {
        self.sent.len()
    }

    /// The prefixes currently advertised to the peer (their UPDATEs were produced by
    /// [`RibOut::sync`]; the driver reports them only once those went out).
    pub fn advertised_prefixes(&self) -> &Prefixes {
        &self.advertised
    }

    /// Forgets what was sent for `family` so the next sync re-advertises it (ROUTE-REFRESH).
    pub fn refresh(&mut self, family: Family) {
        self.sent.retain(|p, _| Family::of(p) != family);
        self.advertised = self.advertised.iter().filter(|p| Family::of(p) != family).copied().collect();
    }

    /// UPDATEs taking the peer from what it was sent to `desired`; empty when not up.
    ///
    /// `desired` holds the local view (no MP attributes); export rewrites are applied here.
    /// Routes sharing one `Arc` cost one attribute set in memory and compare by pointer.
    pub fn sync(&mut self, desired: &Routes) -> Vec<Update> {
        if !self.up {
            return Vec::new();
        }
        let stale: Vec<IpNet> = self.sent.keys().filter(|p| !desired.contains_key(*p)).copied().collect();
        self.sync_among(stale, desired.iter())
    }

    /// [`RibOut::sync`] when the peer was last synced to a set that differs from
    /// `desired` only at `changed`: only those prefixes are looked at (a new Service
    /// among 10 000 costs one lookup, not 10 000).
    pub fn sync_changed(&mut self, desired: &Routes, changed: &BTreeSet<IpNet>) -> Vec<Update> {
        if !self.up {
            return Vec::new();
        }
        let stale: Vec<IpNet> = changed
            .iter()
            .filter(|p| !desired.contains_key(*p) && self.sent.contains_key(*p))
            .copied()
            .collect();
        self.sync_among(stale, changed.iter().filter_map(|p| desired.get_key_value(p)))
    }

    /// Withdraws `stale` and announces whichever of `candidates` was not sent as is.
    fn sync_among<'a>(
        &mut self,
        stale: Vec<IpNet>,
        candidates: impl Iterator<Item = (&'a IpNet, &'a Arc<PathAttributes>)>,
    ) -> Vec<Update> {
        let mut out = Vec::new();
        // Withdrawals first, so a replaced attribute set never shows two paths at once.
        let (mut withdraw_v4, mut withdraw_v6): (Vec<IpNet>, Vec<IpNet>) =
            stale.into_iter().partition(|p| matches!(p, IpNet::V4(_)));
        for p in withdraw_v4.iter().chain(&withdraw_v6) {
            self.sent.remove(p);
            self.advertised.remove(p);
        }
        withdraw_v4.sort_unstable();
        withdraw_v6.sort_unstable();
        pack_withdrawals(&withdraw_v4, Family::IPV4_UNICAST, &mut out);
        pack_withdrawals(&withdraw_v6, Family::IPV6_UNICAST, &mut out);

        // Group changed prefixes by attribute set, keeping first-seen order.
        let mut index: HashMap<(&PathAttributes, Family), usize> = HashMap::new();
        let mut groups: Vec<(&Arc<PathAttributes>, Family, Vec<IpNet>)> = Vec::new();
        let mut last: Option<(&Arc<PathAttributes>, Family, usize)> = None;
        for (prefix, attrs) in candidates {
            let family = Family::of(prefix);
            if !self.families.contains(&family) || !self.can_announce(family, attrs) {
                continue;
            }
            if self.sent.get(prefix).is_some_and(|a| Arc::ptr_eq(a, attrs) || **a == **attrs) {
                continue;
            }
            // Neighbours mostly share one attribute set (one `Arc`): only a new one is
            // hashed (hashing every prefix's attributes took half of a 50k-route sync).
            let i = match last {
                Some((a, f, i)) if f == family && Arc::ptr_eq(a, attrs) => i,
                _ => *index.entry((&**attrs, family)).or_insert_with(|| {
                    groups.push((attrs, family, Vec::new()));
                    groups.len() - 1
                }),
            };
            last = Some((attrs, family, i));
            if let Some(g) = groups.get_mut(i) {
                g.2.push(*prefix);
            }
        }
        self.sent.reserve(groups.iter().map(|g| g.2.len()).sum());
        for (attrs, family, prefixes) in groups {
            for p in &prefixes {
                self.sent.insert(*p, attrs.clone());
                self.advertised.insert(*p);
            }
            let exported = self.exported(attrs, family);
            pack_announcements(exported, &prefixes, self.four_octet, &mut out);
        }
        if self.eor_pending {
            self.eor_pending = false;
            out.extend(self.families.iter().map(|f| Update::end_of_rib(*f)));
        }
        out
    }

    fn can_announce(&self, family: Family, attrs: &PathAttributes) -> bool {
        if family == Family::IPV4_UNICAST && self.ipv4_next_hop(attrs).is_some() {
            return true;
        }
        (family != Family::IPV4_UNICAST || self.ipv4_over_ipv6) && self.export.next_hop_v6.is_some()
    }

    /// The IPv4 next hop of an IPv4 route: preferred to an IPv6 one whenever there is one.
    fn ipv4_next_hop(&self, attrs: &PathAttributes) -> Option<Ipv4Addr> {
        attrs.next_hop.or(self.export.next_hop_v4)
    }

    /// Applies the export rewrites for this peer (RFC 4271 §5.1).
    fn exported(&self, attrs: &PathAttributes, family: Family) -> PathAttributes {
        let mut a = attrs.clone();
        a.mp_reach = None;
        a.mp_unreach = None;
        a.as4_path = None;
        a.origin = Some(a.origin.unwrap_or(Origin::Igp));
        let mut path = a.as_path.take().unwrap_or_default();
        if self.export.ebgp {
            path.prepend(self.export.local_as);
            // RFC 4271 §5.1.5: LOCAL_PREF is not sent to external peers.
            a.local_pref = None;
        } else if a.local_pref.is_none() {
            a.local_pref = Some(100);
        }
        a.as_path = Some(path);
        a.next_hop = self.ipv4_next_hop(&a).filter(|_| family == Family::IPV4_UNICAST);
        // IPv6 routes, and IPv4 ones without an IPv4 next hop (RFC 8950: the session over
        // a link-local address of unnumbered peering), go in MP_REACH with an IPv6 one.
        if a.next_hop.is_none()
            && let Some(global) = self.export.next_hop_v6
        {
            let link_local = self.export.next_hop_v6_link_local;
            a.mp_reach =
                Some(MpReach { family, next_hop: MpNextHop::V6 { global, link_local }, nlri: Vec::new() });
        }
        if !self.four_octet {
            a.prepare_for_two_octet_peer();
        }
        a
    }
}

fn pack_withdrawals(prefixes: &[IpNet], family: Family, out: &mut Vec<Update>) {
    // MP_UNREACH costs an extended attribute header plus AFI/SAFI.
    let budget = MAX_MESSAGE_LEN - UPDATE_FIXED - if family == Family::IPV4_UNICAST { 0 } else { 4 + 3 };
    for chunk in chunks_by_size(prefixes, budget) {
        let mut u = Update::default();
        if family == Family::IPV4_UNICAST {
            u.withdrawn =
                chunk.iter().filter_map(|p| if let IpNet::V4(p) = p { Some(*p) } else { None }).collect();
        } else {
            u.attributes.mp_unreach = Some(MpUnreach { family, withdrawn: chunk.to_vec() });
        }
        out.push(u);
    }
}

fn pack_announcements(attrs: PathAttributes, prefixes: &[IpNet], four_octet: bool, out: &mut Vec<Update>) {
    let mut base = attrs.clone();
    let mp_overhead = match base.mp_reach.take() {
        // Extended attribute header, AFI/SAFI, next hop length and value, reserved octet.
        Some(mp) => {
            4 + 3
                + 1
                + if matches!(mp.next_hop, MpNextHop::V6 { link_local: Some(_), .. }) { 32 } else { 16 }
                + 1
        }
        None => 0,
    };
    let mut buf = BytesMut::new();
    base.encode(four_octet, &mut buf);
    let budget = MAX_MESSAGE_LEN.saturating_sub(UPDATE_FIXED + buf.len() + mp_overhead);
    for chunk in chunks_by_size(prefixes, budget) {
        let mut u = Update { attributes: attrs.clone(), ..Update::default() };
        if let Some(mp) = u.attributes.mp_reach.as_mut() {
            mp.nlri = chunk.to_vec();
        } else {
            u.nlri =
                chunk.iter().filter_map(|p| if let IpNet::V4(p) = p { Some(*p) } else { None }).collect();
        }
        out.push(u);
    }
}

/// Splits prefixes into runs whose encoded size stays within `budget` bytes.
fn chunks_by_size(prefixes: &[IpNet], budget: usize) -> Vec<&[IpNet]> {
    let mut chunks = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, p) in prefixes.iter().enumerate() {
        let n = prefix_wire_len(p);
        if size + n > budget && i > start {
            chunks.push(prefixes.get(start..i).unwrap_or_default());
            start = i;
            size = 0;
        }
        size += n;
    }
    if start < prefixes.len() {
        chunks.push(prefixes.get(start..).unwrap_or_default());
    }
    chunks
}
