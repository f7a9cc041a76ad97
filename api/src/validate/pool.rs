//! IPAddressPools: ranges, namespaces, and overlaps within and across pools.

use super::check::Check;
use super::{ValidationError, kind};
use crate::address::AddressRange;
use crate::crd::IpAddressPool;
use crate::selector::is_dns_subdomain;

/// A parsed pool range with where it came from, for the overlap check.
pub(super) struct PoolRange {
    pub(super) pool: String,
    pub(super) index: usize,
    pub(super) range: AddressRange,
}

pub(super) fn check_pool(c: &mut Check<'_>, pool: &IpAddressPool, ranges: &mut Vec<PoolRange>) {
    let spec = &pool.spec;
    if spec.addresses.is_empty() {
        c.err("spec.addresses", "the pool has no addresses", "list at least one CIDR or range");
    }
    for (i, entry) in spec.addresses.iter().enumerate() {
        if entry.contains(char::is_whitespace) {
            // The CRD pattern has no spaces; the parser would forgive them.
            c.err(format!("spec.addresses[{i}]"), format!("{entry:?} contains spaces"), "remove them");
            continue;
        }
        match AddressRange::parse(entry) {
            Ok(range) => ranges.push(PoolRange { pool: c.name.clone(), index: i, range }),
            Err(e) => c.err(
                format!("spec.addresses[{i}]"),
                e.to_string(),
                "write a CIDR (203.0.113.0/24) or a range (198.51.100.10-198.51.100.20)",
            ),
        }
    }
    if let Some(alloc) = &spec.service_allocation {
        for (i, ns) in alloc.namespaces.iter().enumerate() {
            if !is_dns_subdomain(ns) || ns.len() > 63 || ns.contains('.') {
                c.err(
                    format!("spec.serviceAllocation.namespaces[{i}]"),
                    format!("{ns:?} is not a namespace name"),
                    "use lowercase letters, digits and '-', at most 63 characters",
                );
            }
        }
        c.selectors("spec.serviceAllocation.namespaceSelectors", &alloc.namespace_selectors);
        c.selectors("spec.serviceAllocation.serviceSelectors", &alloc.service_selectors);
    }
}

/// Reports every pair of overlapping entries, within a pool or across pools, on both sides.
pub(super) fn check_overlaps(ranges: &[PoolRange], errors: &mut Vec<ValidationError>) {
    let mut sorted: Vec<&PoolRange> = ranges.iter().collect();
    sorted.sort_by_key(|r| (r.range.is_ipv4(), r.range.first, r.range.last));
    for (i, a) in sorted.iter().enumerate() {
        for b in sorted.iter().skip(i + 1) {
            if b.range.is_ipv4() != a.range.is_ipv4() || b.range.first > a.range.last {
                break;
            }
            for (me, other) in [(a, b), (b, a)] {
                let where_other = if me.pool == other.pool {
                    format!("spec.addresses[{}] of the same pool", other.index)
                } else {
                    format!("IPAddressPool {:?} (spec.addresses[{}])", other.pool, other.index)
                };
                errors.push(ValidationError {
                    kind: kind::IP_ADDRESS_POOL,
                    name: me.pool.clone(),
                    field: format!("spec.addresses[{}]", me.index),
                    problem: format!("{} overlaps {} in {}", me.range, other.range, where_other),
                    fix: "make pools and their entries disjoint".into(),
                });
            }
        }
    }
}
