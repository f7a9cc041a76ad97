//! AS_PATH and AS4_PATH (RFC 4271 §4.3, RFC 6793): segments, prepending, merging, and
//! their value encoding with 2- or 4-octet ASNs.
use crate::bgp::reader::Reader;
use bytes::{BufMut, Bytes, BytesMut};

/// AS number that stands in for a 4-octet AS towards 2-octet speakers (RFC 6793).
pub const AS_TRANS: u32 = 23456;

/// One AS_PATH segment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AsSegment {
    /// Ordered ASes the route traversed.
    Sequence(Vec<u32>),
    /// Unordered ASes (aggregation).
    Set(Vec<u32>),
}

/// AS_PATH (or AS4_PATH) as a list of segments, ASNs always held as 4 octets.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct AsPath {
    /// Segments in wire order.
    pub segments: Vec<AsSegment>,
}

impl AsPath {
    /// A path made of one AS_SEQUENCE.
    pub fn sequence(asns: impl Into<Vec<u32>>) -> Self {
        Self { segments: vec![AsSegment::Sequence(asns.into())] }
    }

    /// Prepends `asn` to the first AS_SEQUENCE, creating one if needed (RFC 4271 §5.1.2).
    pub fn prepend(&mut self, asn: u32) {
        if let Some(AsSegment::Sequence(s)) = self.segments.first_mut()
            && s.len() < 255
        {
            s.insert(0, asn);
            return;
        }
        self.segments.insert(0, AsSegment::Sequence(vec![asn]));
    }

    /// Number of ASes for path selection (an AS_SET counts as one, RFC 4271 §9.1.2.2).
    pub fn path_len(&self) -> usize {
        self.segments
            .iter()
            .map(|s| match s {
                AsSegment::Sequence(v) => v.len(),
                AsSegment::Set(_) => 1,
            })
            .sum()
    }

    /// True when some ASN needs 4 octets.
    pub fn has_four_octet(&self) -> bool {
        self.segments.iter().any(|s| match s {
            AsSegment::Sequence(v) | AsSegment::Set(v) => v.iter().any(|a| *a > 0xffff),
        })
    }

    /// Merges AS_PATH and AS4_PATH received from a 2-octet speaker (RFC 6793 §4.2.3).
    pub fn merge_as4(&self, as4: &AsPath) -> AsPath {
        let (n, n4) = (self.path_len(), as4.path_len());
        if n4 > n {
            return self.clone();
        }
        // Keep the leading (n - n4) ASes of AS_PATH, then append AS4_PATH.
        let mut keep = n - n4;
        let mut segments = Vec::new();
        for s in &self.segments {
            if keep == 0 {
                break;
            }
            match s {
                AsSegment::Sequence(v) => {
                    let take = v.len().min(keep);
                    segments.push(AsSegment::Sequence(v.get(..take).unwrap_or_default().to_vec()));
                    keep -= take;
                }
                AsSegment::Set(v) => {
                    segments.push(AsSegment::Set(v.clone()));
                    keep -= 1;
                }
            }
        }
        segments.extend(as4.segments.iter().cloned());
        AsPath { segments }
    }

    pub(super) fn encode_value(&self, four_octet: bool, out: &mut BytesMut) {
        for s in &self.segments {
            let (t, v) = match s {
                AsSegment::Set(v) => (1u8, v),
                AsSegment::Sequence(v) => (2u8, v),
            };
            // A segment holds at most 255 ASes: split longer ones.
            for chunk in v.chunks(255) {
                out.put_u8(t);
                out.put_u8(chunk.len() as u8);
                for a in chunk {
                    if four_octet {
                        out.put_u32(*a);
                    } else {
                        out.put_u16(if *a > 0xffff { AS_TRANS as u16 } else { *a as u16 });
                    }
                }
            }
        }
    }

    pub(super) fn decode_value(value: Bytes, four_octet: bool) -> Option<AsPath> {
        let mut r = Reader::new(value);
        let mut segments = Vec::new();
        while !r.is_empty() {
            let t = r.u8()?;
            let n = r.u8()?;
            if n == 0 {
                return None; // RFC 7606 §7.2: a zero-length segment is malformed.
            }
            let mut v = Vec::with_capacity(usize::from(n));
            for _ in 0..n {
                v.push(if four_octet { r.u32()? } else { u32::from(r.u16()?) });
            }
            segments.push(match t {
                1 => AsSegment::Set(v),
                2 => AsSegment::Sequence(v),
                _ => return None,
            });
        }
        Some(AsPath { segments })
    }
}
