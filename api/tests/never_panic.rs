//! Parsers read user files: whatever the input, they return an error, never panic.

use ferrolb_api::{AddressRange, Community, Duration, parse_stream};
use proptest::prelude::*;

proptest! {
    #[test]
    fn duration_parse_never_panics_and_display_round_trips(s in "\\PC{0,16}") {
        if let Ok(d) = s.parse::<Duration>() {
            prop_assert_eq!(d.to_string().parse::<Duration>(), Ok(d));
        }
    }

    #[test]
    fn duration_display_round_trips(secs in 0u64..1_000_000, nanos in 0u32..1_000_000_000) {
        let d = Duration(std::time::Duration::new(secs, nanos));
        prop_assert_eq!(d.to_string().parse::<Duration>(), Ok(d));
    }

    #[test]
    fn address_and_community_parsers_never_panic(s in "[0-9a-f:./\\-]{0,40}") {
        let _ = AddressRange::parse(&s);
        let _ = s.parse::<Community>();
    }

    #[test]
    fn community_display_round_trips(a: u16, b: u16, x: u32, y: u32, z: u32) {
        for c in [Community::Standard(a, b), Community::Large(x, y, z)] {
            prop_assert_eq!(c.to_string().parse::<Community>(), Ok(c));
        }
    }

    #[test]
    fn stream_parser_never_panics(s in "(---\n|apiVersion: |ferrolb.io/v1alpha1|v1\n|kind: |List\n|IPAddressPool\n|items:\n|- |spec:\n|  addresses: |\\[|\\]|\\{|\\}|\"|'|: |\n|[a-z0-9]{1,4}){0,40}") {
        let _ = parse_stream("fuzz.yaml", &s);
    }
}
