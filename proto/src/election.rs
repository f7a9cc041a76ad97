//! L2 ownership election: one owner per address among live, eligible candidates.
//!
//! Rendezvous (highest-random-weight) hashing: every candidate scores
//! `weight(node, address)` and the highest score owns the address. Every speaker
//! computes the same owner from the same candidate set, with no coordination, and
//! a node joining takes over only the addresses it now scores highest on; a node
//! leaving hands over only the addresses it owned. Services that share an address
//! share its owner, since the score depends on the address alone.
//!
//! The weight is FNV-1a (64 bit) over the node name, a separator and the address
//! octets, finished with the splitmix64 mixer. It is fixed by this file and by the
//! golden test below: changing it would move addresses during a rolling upgrade,
//! while old and new speakers disagree.

use std::net::IpAddr;

/// The score of `node` for `address`; the highest score owns the address.
pub fn weight(node: &str, address: IpAddr) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let octets: Vec<u8> = match address {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let mut h = OFFSET;
    // 0xff never occurs in UTF-8, so `node` and the octets cannot run into each other.
    for b in node.as_bytes().iter().chain(&[0xff]).chain(&octets) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(PRIME);
    }
    splitmix64(h)
}

pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The owner of `address` among `candidates` (live and eligible nodes), or `None`
/// when there is none. Equal scores, vanishingly rare, go to the smaller name.
pub fn owner<'a, I>(address: IpAddr, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    preferred_owner(address, candidates.into_iter().map(|n| (n, 0)))
}

/// The owner of `address` among `candidates` paired with the operator's preference for
/// them: the highest preference wins, and the score elects among equally preferred nodes,
/// so addresses still spread over them and the less preferred take over only when none is left.
pub fn preferred_owner<'a, I>(address: IpAddr, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = (&'a str, u32)>,
{
    candidates
        .into_iter()
        .map(|(n, preference)| (preference, weight(n, address), std::cmp::Reverse(n)))
        .max()
        .map(|(_, _, std::cmp::Reverse(n))| n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn v4(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    #[test]
    fn weights_are_pinned_across_versions() {
        // Changing these moves addresses between nodes running different versions.
        let golden = [
            weight("node1", v4(200)),
            weight("node2", v4(200)),
            weight("node1", "2001:db8::200".parse().unwrap_or(v4(0))),
        ];
        assert_eq!(golden, GOLDEN);
    }
    const GOLDEN: [u64; 3] = [0x8412_9ff7_5ddf_bfa2, 0x9313_b578_ff3b_5e74, 0xc998_7ae6_0033_f8f4];

    #[test]
    fn owner_is_independent_of_candidate_order() {
        let a = ["node1", "node2", "node3", "node4"];
        let b = ["node4", "node2", "node1", "node3"];
        for last in 200..=250 {
            assert_eq!(owner(v4(last), a), owner(v4(last), b));
        }
    }

    #[test]
    fn no_candidates_no_owner() {
        assert_eq!(owner(v4(200), std::iter::empty()), None);
    }

    #[test]
    fn a_joining_node_moves_only_what_it_wins() {
        let before = ["node1", "node2"];
        let after = ["node1", "node2", "node3"];
        let mut moved = 0;
        for last in 0..=255 {
            let (o1, o2) = (owner(v4(last), before), owner(v4(last), after));
            if o1 != o2 {
                assert_eq!(o2, Some("node3"), "{} moved between old nodes", v4(last));
                moved += 1;
            }
        }
        // About a third of the addresses go to the newcomer.
        assert!((50..120).contains(&moved), "{moved} of 256 moved");
    }

    #[test]
    fn a_leaving_node_hands_over_only_its_own() {
        let before = ["node1", "node2", "node3"];
        let after = ["node1", "node3"];
        for last in 0..=255 {
            let o1 = owner(v4(last), before);
            if o1 != Some("node2") {
                assert_eq!(owner(v4(last), after), o1);
            }
        }
    }

    #[test]
    fn the_most_preferred_live_node_owns_and_the_others_take_over_in_order() {
        for last in 0..=255 {
            let ip = v4(last);
            // Whatever the scores, node3 (preference 50) owns, then node2 (10), then the rest.
            let all = [("node1", 0), ("node2", 10), ("node3", 50), ("node4", 0)];
            assert_eq!(preferred_owner(ip, all), Some("node3"));
            assert_eq!(preferred_owner(ip, all.into_iter().filter(|c| c.0 != "node3")), Some("node2"));
            let rest = [("node1", 0), ("node4", 0)];
            assert_eq!(preferred_owner(ip, rest), owner(ip, ["node1", "node4"]));
        }
    }

    #[test]
    fn equally_preferred_nodes_share_the_addresses() {
        let nodes = [("node1", 0), ("node2", 7), ("node3", 7), ("node4", 7)];
        let mut count: BTreeMap<&str, u32> = BTreeMap::new();
        for i in 0..768u32 {
            let addr = IpAddr::from([198, 18, (i >> 8) as u8, i as u8]);
            *count.entry(preferred_owner(addr, nodes).unwrap_or("")).or_default() += 1;
        }
        assert_eq!(count.get("node1"), None);
        assert!(count.values().all(|&c| (200..310).contains(&c)), "{count:?}");
    }

    #[test]
    fn ownership_spreads_over_nodes() {
        let nodes = ["node1", "node2", "node3", "node4"];
        let mut count: BTreeMap<&str, u32> = BTreeMap::new();
        for i in 0..1024u32 {
            let addr = IpAddr::from([198, 18, (i >> 8) as u8, i as u8]);
            *count.entry(owner(addr, nodes).unwrap_or("")).or_default() += 1;
        }
        assert!(count.values().all(|&c| (180..330).contains(&c)), "{count:?}");
    }
}
