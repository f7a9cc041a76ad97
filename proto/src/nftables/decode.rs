//! The kernel's answers: acknowledgements, errors and dumps. Never panics on input.

use super::encode::{
    CHAIN_HOOK, CHAIN_NAME, COUNTER_PACKETS, EXPR_DATA, EXPR_NAME, HOOK_DEV, LIST_ELEM, Msg, RULE_CHAIN,
    RULE_EXPRESSIONS,
};

const NLMSG_ERROR: u16 = 2;
/// The end of a dump.
pub const NLMSG_DONE: u16 = 3;

/// A message the kernel could not have sent.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed netlink message at byte {0}")]
pub struct Malformed(pub usize);

/// One netlink message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// nlmsghdr type.
    pub kind: u16,
    /// nlmsghdr flags.
    pub flags: u16,
    /// Sequence number.
    pub seq: u32,
    /// nfgenmsg family (0 for errors).
    pub family: u8,
    /// nfgenmsg res_id, host order.
    pub res_id: u16,
    payload: &'a [u8],
}

impl<'a> Message<'a> {
    /// An acknowledgement (error 0) or error (a negative errno): its code and the
    /// sequence number of the message it answers.
    pub fn error(&self) -> Option<(i32, u32)> {
        if self.kind != NLMSG_ERROR {
            return None;
        }
        let code = i32::from_ne_bytes(self.payload.get(..4)?.try_into().ok()?);
        let seq = u32::from_ne_bytes(self.payload.get(12..16)?.try_into().ok()?);
        Some((code, seq))
    }

    /// The nf_tables attributes after nfgenmsg.
    pub fn attrs(&self) -> Attrs<'a> {
        Attrs(self.payload.get(4..).unwrap_or_default())
    }
}

/// The messages in a buffer.
pub fn messages(mut buf: &[u8]) -> impl Iterator<Item = Result<Message<'_>, Malformed>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let header = |b: &[u8], i: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?))
        };
        let parsed = (|| {
            let len = header(buf, 0)? as usize;
            if len < 16 || len > buf.len() {
                return None;
            }
            let kind = u16::from_ne_bytes([buf[4], buf[5]]);
            let flags = u16::from_ne_bytes([buf[6], buf[7]]);
            let seq = header(buf, 8)?;
            let payload = &buf[16..len];
            let (family, res_id) = match payload {
                [f, _, r0, r1, ..] if kind != NLMSG_ERROR => (*f, u16::from_be_bytes([*r0, *r1])),
                _ => (0, 0),
            };
            let m = Message { kind, flags, seq, family, res_id, payload };
            Some((m, len.next_multiple_of(4).min(buf.len())))
        })();
        match parsed {
            Some((m, used)) => {
                buf = &buf[used..];
                at += used;
                Some(Ok(m))
            }
            None => {
                buf = &[];
                Some(Err(Malformed(at)))
            }
        }
    })
}

/// Netlink attributes: (type without the nested flag, payload).
#[derive(Clone, Copy, Debug)]
pub struct Attrs<'a>(&'a [u8]);

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.0;
        let len = usize::from(u16::from_ne_bytes([*b.first()?, *b.get(1)?]));
        let kind = u16::from_ne_bytes([*b.get(2)?, *b.get(3)?]) & 0x3fff;
        if len < 4 || len > b.len() {
            self.0 = &[];
            return None;
        }
        self.0 = &b[len.next_multiple_of(4).min(b.len())..];
        Some((kind, &b[4..len]))
    }
}

impl<'a> Attrs<'a> {
    /// The first attribute of `kind`.
    pub fn get(self, kind: u16) -> Option<&'a [u8]> {
        let mut it = self;
        it.find(|(k, _)| *k == kind).map(|(_, v)| v)
    }
}

fn string(v: &[u8]) -> String {
    String::from_utf8_lossy(v.split(|b| *b == 0).next().unwrap_or_default()).into_owned()
}

/// A chain as a dump shows it: its name and, for a netdev base chain, its interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainInfo {
    /// Its name.
    pub name: String,
    /// Its hook's interface.
    pub device: Option<String>,
}

/// A chain dump's chain, if `m` is one.
pub fn chain(m: &Message<'_>) -> Option<ChainInfo> {
    if m.kind != Msg::NewChain.kind() {
        return None;
    }
    let name = string(m.attrs().get(CHAIN_NAME)?);
    let device = m.attrs().get(CHAIN_HOOK).and_then(|h| Attrs(h).get(HOOK_DEV)).map(string);
    Some(ChainInfo { name, device })
}

/// A rule dump's rule, if `m` is one: its chain and the packets its counters counted.
pub fn rule_packets(m: &Message<'_>) -> Option<(String, u64)> {
    if m.kind != Msg::NewRule.kind() {
        return None;
    }
    let chain = string(m.attrs().get(RULE_CHAIN)?);
    let packets = Attrs(m.attrs().get(RULE_EXPRESSIONS)?)
        .filter(|(k, _)| *k == LIST_ELEM)
        .filter(|(_, e)| Attrs(e).get(EXPR_NAME).map(string).as_deref() == Some("counter"))
        .filter_map(|(_, e)| Attrs(Attrs(e).get(EXPR_DATA)?).get(COUNTER_PACKETS))
        .filter_map(|p| Some(u64::from_be_bytes(p.try_into().ok()?)))
        .sum();
    Some((chain, packets))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nftables::{Chain, Expr, Family, Hook, Rule, Table, batch};

    #[test]
    fn chains_and_devices_read_back_from_what_the_encoder_wrote() {
        let t = Table {
            chains: vec![
                Chain {
                    name: "in0".into(),
                    hook: Some(Hook { number: 0, priority: -500, device: Some("eth0".into()) }),
                },
                Chain { name: "plain".into(), hook: None },
            ],
            sets: Vec::new(),
            rules: vec![Rule { chain: "plain".into(), exprs: vec![Expr::Counter] }],
        };
        let b = batch(&[(Family::Netdev, "t", Some(&t))]);
        let found: Vec<ChainInfo> = messages(&b.bytes).filter_map(|m| chain(&m.ok()?)).collect();
        assert_eq!(
            found,
            vec![
                ChainInfo { name: "in0".into(), device: Some("eth0".into()) },
                ChainInfo { name: "plain".into(), device: None }
            ]
        );
        let rules: Vec<(String, u64)> = messages(&b.bytes).filter_map(|m| rule_packets(&m.ok()?)).collect();
        assert_eq!(rules, vec![("plain".to_string(), 0)]);
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for junk in
            [&[1u8, 2, 3][..], &[200, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[16, 0, 0, 0, 2, 0]]
        {
            let all: Vec<_> = messages(junk).collect();
            assert_eq!(all.len(), 1, "{junk:?}");
            assert!(all[0].is_err(), "{junk:?}");
        }
        // An error message too short to say anything is no error.
        let short = [16u8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let m = messages(&short).next().unwrap().unwrap();
        assert_eq!(m.error(), None);
        assert_eq!(Attrs(&[5, 0, 1, 0]).count(), 0, "length past the end");
    }
}
