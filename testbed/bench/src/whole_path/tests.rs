//! The bench's parsers and arithmetic (no lab).

use std::time::Duration;

use super::observe::{PeerState, peer_state};
use super::{field, line_time, rfc3339_us};
use crate::builds::percentiles;

#[test]
fn percentiles_by_nearest_rank() {
    let xs: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
    let [p50, p90, p99, max] = percentiles(&xs).unwrap();
    assert_eq!(
        (p50, p90, p99, max),
        (
            Duration::from_millis(50),
            Duration::from_millis(90),
            Duration::from_millis(99),
            Duration::from_millis(100)
        )
    );
    assert!(percentiles(&[]).is_none());
    let one = [Duration::from_millis(7)];
    assert_eq!(percentiles(&one).unwrap(), [one[0]; 4]);
}

#[test]
fn peer_state_of_a_restarting_neighbour() {
    let text = "Name       Proto      Table      State  Since         Info
speakers0  BGP        ---        start  10:00:00.000  Passive
  BGP state:          Passive
    Neighbor range:   192.0.2.0/24
peer0_1    BGP        ---        start  10:00:05.000  Active
  BGP state:          Active
    Neighbor address: 192.0.2.12
    Neighbor AS:      64513
    Local AS:         64512
    Neighbor graceful restart active
  Channel ipv4
    State:          UP
    Routes:         2000 imported, 0 exported, 2000 preferred
";
    let s = peer_state(text, "192.0.2.12".parse().unwrap()).unwrap();
    assert_eq!(s, PeerState { established: false, gr_active: true, imported: 2000 });
    assert!(peer_state(text, "192.0.2.11".parse().unwrap()).is_none());
    let up = text
        .replace("  BGP state:          Active", "  BGP state:          Established")
        .replace("    Neighbor graceful restart active\n", "");
    let s = peer_state(&up, "192.0.2.12".parse().unwrap()).unwrap();
    assert_eq!(s, PeerState { established: true, gr_active: false, imported: 2000 });
}

#[test]
fn log_lines_give_their_time_and_fields() {
    let line = "\u{1b}[2m2026-01-02T03:04:05.678901Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m ferrolb_controller::run: replayed Service status \u{1b}[3mservices\u{1b}[0m\u{1b}[2m=\u{1b}[0m200 conflicts=0";
    assert_eq!(line_time(line), rfc3339_us("2026-01-02T03:04:05.678901Z"));
    assert_eq!(rfc3339_us("1970-01-01T00:00:01.5Z"), Some(1_500_000));
    assert_eq!(field(line, "services").as_deref(), Some("200"));
    assert_eq!(field(line, "conflicts").as_deref(), Some("0"));
}
