//! BFDProfiles.

use super::check::Check;
use crate::crd::BfdProfile;
use crate::duration::Duration;

pub(super) fn check_bfd(c: &mut Check<'_>, bfd: &BfdProfile) {
    let spec = &bfd.spec;
    for (field, value) in
        [("spec.receiveInterval", &spec.receive_interval), ("spec.transmitInterval", &spec.transmit_interval)]
    {
        if let Some(d) = c.duration(field, value)
            && !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&d)
        {
            c.err(field, format!("{value:?} is outside 10ms..60s"), "use e.g. 300ms");
        }
    }
    if !(2..=255).contains(&spec.detect_multiplier) {
        c.err("spec.detectMultiplier", format!("{} is outside 2..255", spec.detect_multiplier), "use e.g. 3");
    }
    if !(1..=254).contains(&spec.minimum_ttl) {
        c.err(
            "spec.minimumTtl",
            format!("{} is outside 1..254", spec.minimum_ttl),
            "use 254 for single-hop sessions",
        );
    }
}
