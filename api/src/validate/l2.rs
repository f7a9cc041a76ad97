//! L2Advertisements and the interface names they (and ControlPlaneVIPs) list.

use std::collections::BTreeSet;

use super::check::Check;
use crate::crd::L2Advertisement;

pub(super) fn check_l2_advertisement(c: &mut Check<'_>, adv: &L2Advertisement, pools: &BTreeSet<String>) {
    let spec = &adv.spec;
    c.references("spec.ipAddressPools", &spec.ip_address_pools, pools, "IPAddressPool");
    c.selectors("spec.ipAddressPoolSelectors", &spec.ip_address_pool_selectors);
    c.selectors("spec.serviceSelectors", &spec.service_selectors);
    c.selectors("spec.nodeSelectors", &spec.node_selectors);
    for (i, ifname) in spec.interfaces.iter().enumerate() {
        check_interface(c, &format!("spec.interfaces[{i}]"), ifname);
    }
    for (i, p) in spec.node_preferences.iter().enumerate() {
        c.selector(&format!("spec.nodePreferences[{i}].nodeSelector"), &p.node_selector);
        if !(1..=100).contains(&p.weight) {
            c.err(
                format!("spec.nodePreferences[{i}].weight"),
                format!("weight {} is out of range", p.weight),
                "write a weight from 1 to 100",
            );
        }
    }
}

/// Linux interface names: 1..=15 printable ASCII characters, no '/' or ':', not "." or "..".
pub(super) fn check_interface(c: &mut Check<'_>, field: &str, name: &str) {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && name.chars().all(|ch| ch.is_ascii_graphic() && ch != '/' && ch != ':');
    if !ok {
        c.err(
            field,
            format!("{name:?} is not an interface name"),
            "write a Linux interface name such as eth0 (1 to 15 characters, no '/', ':' or spaces)",
        );
    }
}
