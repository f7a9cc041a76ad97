//! A minimal MRT TABLE_DUMP_V2 writer (RFC 6396 §4.3), to load many prefixes into
//! GoBGP at once with `gobgp mrt inject global FILE`.

use std::net::Ipv4Addr;

const TABLE_DUMP_V2: u16 = 13;
const PEER_INDEX_TABLE: u16 = 1;
const RIB_IPV4_UNICAST: u16 = 2;

/// The first `n` /32s of 198.18.0.0/15 (the benchmarking range, RFC 2544).
pub fn bulk_prefixes(n: u32) -> impl Iterator<Item = Ipv4Addr> {
    let base = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    (0..n.min(1 << 17)).map(move |i| Ipv4Addr::from(base + i))
}

/// An MRT dump with one peer and one locally originated path (empty AS_PATH, ORIGIN
/// IGP, this NEXT_HOP) per /32.
pub fn dump_host_routes(prefixes: impl Iterator<Item = Ipv4Addr>, next_hop: Ipv4Addr) -> Vec<u8> {
    let mut out = Vec::new();
    // Peer index table: collector id, empty view name, one IPv4 peer with a 4-octet AS.
    let mut body = Vec::new();
    body.extend_from_slice(&next_hop.octets());
    body.extend_from_slice(&0u16.to_be_bytes());
    body.extend_from_slice(&1u16.to_be_bytes());
    body.push(0b10); // AS4, IPv4 peer address
    body.extend_from_slice(&next_hop.octets());
    body.extend_from_slice(&next_hop.octets());
    body.extend_from_slice(&0u32.to_be_bytes());
    record(&mut out, PEER_INDEX_TABLE, &body);

    let mut attrs = Vec::new();
    attrs.extend_from_slice(&[0x40, 1, 1, 0]); // ORIGIN IGP
    attrs.extend_from_slice(&[0x40, 2, 0]); // AS_PATH, empty: originated here
    attrs.extend_from_slice(&[0x40, 3, 4]); // NEXT_HOP
    attrs.extend_from_slice(&next_hop.octets());
    let attr_len = u16::try_from(attrs.len()).unwrap_or(u16::MAX);
    for (seq, p) in prefixes.enumerate() {
        let mut body = Vec::with_capacity(32);
        body.extend_from_slice(&u32::try_from(seq).unwrap_or(u32::MAX).to_be_bytes());
        body.push(32);
        body.extend_from_slice(&p.octets());
        body.extend_from_slice(&1u16.to_be_bytes());
        body.extend_from_slice(&0u16.to_be_bytes()); // peer index
        body.extend_from_slice(&0u32.to_be_bytes()); // originated time
        body.extend_from_slice(&attr_len.to_be_bytes());
        body.extend_from_slice(&attrs);
        record(&mut out, RIB_IPV4_UNICAST, &body);
    }
    out
}

fn record(out: &mut Vec<u8>, subtype: u16, body: &[u8]) {
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&TABLE_DUMP_V2.to_be_bytes());
    out.extend_from_slice(&subtype.to_be_bytes());
    out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_framed_with_their_lengths() {
        let nh = Ipv4Addr::new(192, 0, 2, 11);
        let d = dump_host_routes(bulk_prefixes(3), nh);
        // Walk the records by their headers: 1 peer table + 3 RIB entries, exactly.
        let (mut off, mut subtypes) = (0, Vec::new());
        while off < d.len() {
            let subtype = u16::from_be_bytes([d[off + 6], d[off + 7]]);
            let len = u32::from_be_bytes([d[off + 8], d[off + 9], d[off + 10], d[off + 11]]) as usize;
            subtypes.push(subtype);
            off += 12 + len;
        }
        assert_eq!(off, d.len());
        assert_eq!(subtypes, vec![1, 2, 2, 2]);
        assert_eq!(bulk_prefixes(2).last(), Some(Ipv4Addr::new(198, 18, 0, 1)));
    }
}
