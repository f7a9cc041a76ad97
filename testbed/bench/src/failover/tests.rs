//! The `ip monitor` parsing, the filters and the VIPs of `bench failover`.

use std::net::IpAddr;
use std::time::{Duration, UNIX_EPOCH};

use super::neigh::{mac_changes, utc};
use super::*;

#[test]
fn monitor_lines_give_mac_changes_only() {
    let v4: IpAddr = "192.0.2.200".parse().unwrap();
    let v6: IpAddr = "2001:db8::200".parse().unwrap();
    let log = "[1970-01-01T00:00:01.500000] 192.0.2.200 lladdr 00:00:5e:00:53:11 REACHABLE \n\
               [1970-01-01T00:00:02.000000] 192.0.2.200 lladdr 00:00:5E:00:53:12 STALE \n\
               [1970-01-01T00:00:02.100000] 2001:db8::200 lladdr 00:00:5e:00:53:12 STALE \n\
               [1970-01-01T00:00:02.200000] Deleted 192.0.2.200 lladdr 00:00:5e:00:53:12 STALE \n\
               [1970-01-01T00:00:02.300000] 192.0.2.99 lladdr 00:00:5e:00:53:99 NOARP \n\
               [1970-01-01T00:00:02.400000] 192.0.2.200  FAILED \n\
               [1970-01-01T00:00:03.000000] 192.0.2.200 lladdr 00:00:5e:00:53:12 REACHABLE \n\
               [1970-01-01T00:00:04.000000] 192.0.2.200 lladdr 00:00:5e:00:53:11 STA";
    let initial = [(v4, Some("00:00:5e:00:53:11".to_string())), (v6, None)];
    let c = mac_changes(log, &initial);
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!((c[0].addr, c[0].mac.as_str()), (v4, "00:00:5e:00:53:12"));
    assert_eq!(c[0].at, UNIX_EPOCH + Duration::from_secs(2));
    assert_eq!((c[1].addr, c[1].at), (v6, UNIX_EPOCH + Duration::from_millis(2100)));
}

#[test]
fn utc_timestamps_read_back() {
    // date -u -d 2026-11-26T04:52:35 +%s
    let t = utc("2026-11-26T04:52:35.688602").unwrap();
    assert_eq!(t, UNIX_EPOCH + Duration::from_secs(1_795_668_755) + Duration::from_micros(688_602));
    assert_eq!(utc("2000-03-01T00:00:00.000000").unwrap(), UNIX_EPOCH + Duration::from_secs(951_868_800));
    assert_eq!(clock(t), "04:52:35.688");
    assert!(utc("yesterday").is_none());
}

#[test]
fn filters_parse() {
    assert_eq!("v6".parse::<Family>(), Ok(Family::V6));
    assert_eq!("link".parse::<Failure>(), Ok(Failure::LinkDown));
    assert!("both".parse::<Failure>().is_err());
    assert_eq!(vips(&[Family::V6]).len(), 1);
    assert!(vips(&Family::ALL)[0].is_ipv4());
}
