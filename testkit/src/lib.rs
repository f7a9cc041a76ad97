//! ferrolb's test kit, for tests only (no product crate depends on it outside its
//! dev-dependencies): bounded waits for async tests ([`wait`]; `ferrolb_fakeapi::wait`
//! re-exports them), a seeded generator for randomised
//! tests ([`rng`]) and the small values every test spells the same way.

use std::collections::BTreeSet;
use std::net::{IpAddr, UdpSocket};

pub mod rng;
pub mod wait;

/// `s` as an IP address (a typo fails the test that wrote it).
pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|e| panic!("{s:?} is no IP address: {e}"))
}

/// A set of names (members, nodes, selectors).
pub fn names(n: &[&str]) -> BTreeSet<String> {
    n.iter().map(|s| (*s).to_owned()).collect()
}

/// `N` different UDP ports on 127.0.0.1 that were free a moment ago (bound together,
/// then released for the test to bind).
pub fn free_udp_ports<const N: usize>() -> [u16; N] {
    let sockets: Vec<UdpSocket> = (0..N)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("binding 127.0.0.1:0: {e}")))
        .collect();
    std::array::from_fn(|i| sockets[i].local_addr().map_or(0, |a| a.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_differ_and_can_be_bound() {
        let [a, b, c] = free_udp_ports::<3>();
        assert!(a != b && b != c && a != c && a != 0);
        for p in [a, b, c] {
            assert!(UdpSocket::bind(("127.0.0.1", p)).is_ok());
        }
        assert_eq!(ip("192.0.2.1"), IpAddr::from([192, 0, 2, 1]));
        assert_eq!(names(&["b", "a"]).into_iter().collect::<Vec<_>>(), ["a", "b"]);
    }
}
