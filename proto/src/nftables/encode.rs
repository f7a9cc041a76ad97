//! Tables → one nfnetlink batch.

use super::{Chain, Expr, Family, Hook, Rule, Set, Table, Verdict};

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const BATCH_BEGIN: u16 = 0x10;
const BATCH_END: u16 = 0x11;

const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

/// `NFT_MSG_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Msg {
    NewTable = 0,
    DelTable = 2,
    NewChain = 3,
    GetChain = 4,
    NewRule = 6,
    GetRule = 7,
    NewSet = 9,
    NewSetElem = 12,
}

impl Msg {
    /// The nlmsghdr type of this nf_tables message.
    pub(super) fn kind(self) -> u16 {
        (NFNL_SUBSYS_NFTABLES << 8) | self as u16
    }
}

// Attribute numbers, by object.
const TABLE_NAME: u16 = 1;
const CHAIN_TABLE: u16 = 1;
pub(super) const CHAIN_NAME: u16 = 3;
pub(super) const CHAIN_HOOK: u16 = 4;
const CHAIN_POLICY: u16 = 5;
const CHAIN_TYPE: u16 = 7;
const HOOK_HOOKNUM: u16 = 1;
const HOOK_PRIORITY: u16 = 2;
pub(super) const HOOK_DEV: u16 = 3;
const RULE_TABLE: u16 = 1;
pub(super) const RULE_CHAIN: u16 = 2;
pub(super) const RULE_EXPRESSIONS: u16 = 4;
pub(super) const LIST_ELEM: u16 = 1;
pub(super) const EXPR_NAME: u16 = 1;
pub(super) const EXPR_DATA: u16 = 2;
const SET_TABLE: u16 = 1;
const SET_NAME: u16 = 2;
const SET_FLAGS: u16 = 3;
const SET_KEY_TYPE: u16 = 4;
const SET_KEY_LEN: u16 = 5;
const SET_DATA_TYPE: u16 = 6;
const SET_ID: u16 = 10;
const SET_ELEM_LIST_TABLE: u16 = 1;
const SET_ELEM_LIST_SET: u16 = 2;
const SET_ELEM_LIST_ELEMENTS: u16 = 3;
const SET_ELEM_KEY: u16 = 1;
const SET_ELEM_DATA: u16 = 2;
const DATA_VALUE: u16 = 1;
const DATA_VERDICT: u16 = 2;
const VERDICT_CODE: u16 = 1;
const VERDICT_CHAIN: u16 = 2;
pub(super) const COUNTER_PACKETS: u16 = 2;

const NFT_SET_MAP: u32 = 0x8;
const NFT_DATA_VERDICT: u32 = 0xffff_ff00;
const NF_ACCEPT: i32 = 1;
const NF_DROP: i32 = 0;
const NFT_GOTO: i32 = -4;
/// Elements per message: an attribute's length is 16 bits.
const ELEMENTS_PER_MESSAGE: usize = 256;

/// One nfnetlink batch and what each of its messages does (for errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The bytes to send.
    pub bytes: Vec<u8>,
    /// By sequence number: what the message does, as `nft` would say it.
    described: Vec<String>,
}

impl Batch {
    /// What the message numbered `seq` does.
    pub fn describe(&self, seq: u32) -> &str {
        self.described.get(seq as usize).map_or("the batch", String::as_str)
    }

    /// The sequence number of the last message, the one the kernel acknowledges.
    pub fn last(&self) -> u32 {
        u32::try_from(self.described.len()).unwrap_or(u32::MAX).saturating_sub(2)
    }
}

/// One batch that replaces each named table with its contents (`None`: none), or
/// with nothing. Creating a table first makes its delete valid when it is absent.
pub fn batch(tables: &[(Family, &str, Option<&Table>)]) -> Batch {
    let mut w = Writer::default();
    w.message(BATCH_BEGIN, 0, 0, NFNL_SUBSYS_NFTABLES, "begin", |_| {});
    for &(family, name, _) in tables {
        let what = format!("table {} {name}", family.name());
        w.message(Msg::NewTable.kind(), NLM_F_CREATE, family.number(), 0, &format!("add {what}"), |a| {
            a.str(TABLE_NAME, name)
        });
        w.message(Msg::DelTable.kind(), 0, family.number(), 0, &format!("delete {what}"), |a| {
            a.str(TABLE_NAME, name)
        });
    }
    for &(family, name, table) in tables {
        if let Some(table) = table {
            add_table(&mut w, family, name, table);
        }
    }
    // The kernel acknowledges the last message: its answer ends the batch's answers.
    if let Some(last) = w.last_header {
        let flags = u16::from_ne_bytes([w.buf[last + 6], w.buf[last + 7]]) | NLM_F_ACK;
        w.buf[last + 6..last + 8].copy_from_slice(&flags.to_ne_bytes());
    }
    w.message(BATCH_END, 0, 0, NFNL_SUBSYS_NFTABLES, "commit", |_| {});
    Batch { bytes: w.buf, described: w.described }
}

/// A dump of a table's chains or rules (`NLM_F_DUMP`).
pub fn dump_request(rules: bool, family: Family, table: &str) -> Vec<u8> {
    let mut w = Writer::default();
    let (kind, attr) = if rules { (Msg::GetRule, RULE_TABLE) } else { (Msg::GetChain, CHAIN_TABLE) };
    w.message(kind.kind(), NLM_F_DUMP, family.number(), 0, "dump", |a| a.str(attr, table));
    w.buf
}

fn add_table(w: &mut Writer, family: Family, table: &str, t: &Table) {
    let f = family.number();
    let of = |what: &str| format!("{what} {} {table}", family.name());
    w.message(Msg::NewTable.kind(), NLM_F_CREATE, f, 0, &of("add table"), |a| a.str(TABLE_NAME, table));
    for c in &t.chains {
        w.message(
            Msg::NewChain.kind(),
            NLM_F_CREATE,
            f,
            0,
            &format!("{} {}", of("add chain"), c.name),
            |a| chain(a, table, c),
        );
    }
    for s in &t.sets {
        // The kernel wants every new set numbered within its batch.
        w.set_id += 1;
        let id = w.set_id;
        w.message(Msg::NewSet.kind(), NLM_F_CREATE, f, 0, &format!("{} {}", of("add set"), s.name), |a| {
            set(a, table, s, id)
        });
        for chunk in s.elements.chunks(ELEMENTS_PER_MESSAGE) {
            let what = format!("{} {} ({} elements)", of("add element"), s.name, chunk.len());
            w.message(Msg::NewSetElem.kind(), NLM_F_CREATE, f, 0, &what, |a| {
                a.str(SET_ELEM_LIST_TABLE, table);
                a.str(SET_ELEM_LIST_SET, &s.name);
                a.nest(SET_ELEM_LIST_ELEMENTS, |a| {
                    for (key, verdict) in chunk {
                        a.nest(LIST_ELEM, |a| {
                            a.nest(SET_ELEM_KEY, |a| a.bytes(DATA_VALUE, key));
                            if let Some(v) = verdict {
                                a.nest(SET_ELEM_DATA, |a| verdict_data(a, v));
                            }
                        });
                    }
                });
            });
        }
    }
    for r in &t.rules {
        let what = format!("{} {}", of("add rule"), r.chain);
        w.message(Msg::NewRule.kind(), NLM_F_CREATE | NLM_F_APPEND, f, 0, &what, |a| rule(a, table, r));
    }
}

fn chain(a: &mut Writer, table: &str, c: &Chain) {
    a.str(CHAIN_TABLE, table);
    a.str(CHAIN_NAME, &c.name);
    if let Some(Hook { number, priority, device }) = &c.hook {
        a.nest(CHAIN_HOOK, |a| {
            a.u32(HOOK_HOOKNUM, *number);
            a.u32(HOOK_PRIORITY, *priority as u32);
            if let Some(dev) = device {
                a.str(HOOK_DEV, dev);
            }
        });
        a.u32(CHAIN_POLICY, NF_ACCEPT as u32);
        a.str(CHAIN_TYPE, "filter");
    }
}

fn set(a: &mut Writer, table: &str, s: &Set, id: u32) {
    let (key_type, key_len) = s.key.number_and_len();
    a.str(SET_TABLE, table);
    a.str(SET_NAME, &s.name);
    a.u32(SET_FLAGS, if s.map { NFT_SET_MAP } else { 0 });
    a.u32(SET_KEY_TYPE, key_type);
    a.u32(SET_KEY_LEN, key_len);
    if s.map {
        a.u32(SET_DATA_TYPE, NFT_DATA_VERDICT);
    }
    a.u32(SET_ID, id);
}

fn verdict_data(a: &mut Writer, v: &Verdict) {
    a.nest(DATA_VERDICT, |a| {
        let (code, chain) = match v {
            Verdict::Accept => (NF_ACCEPT, None),
            Verdict::Drop => (NF_DROP, None),
            Verdict::Goto(chain) => (NFT_GOTO, Some(chain)),
        };
        a.u32(VERDICT_CODE, code as u32);
        if let Some(chain) = chain {
            a.str(VERDICT_CHAIN, chain);
        }
    });
}

fn rule(a: &mut Writer, table: &str, r: &Rule) {
    a.str(RULE_TABLE, table);
    a.str(RULE_CHAIN, &r.chain);
    a.nest(RULE_EXPRESSIONS, |a| {
        for e in &r.exprs {
            a.nest(LIST_ELEM, |a| expr(a, e));
        }
    });
}

/// One expression: its name, then its attributes (numbered per expression type).
fn expr(a: &mut Writer, e: &Expr) {
    let name = match e {
        Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
        Expr::Cmp { .. } => "cmp",
        Expr::Payload { .. } => "payload",
        Expr::Lookup { .. } => "lookup",
        Expr::Jhash { .. } => "hash",
        Expr::Immediate { .. } | Expr::Verdict(_) => "immediate",
        Expr::CtState { .. } => "ct",
        Expr::And { .. } => "bitwise",
        Expr::Counter => "counter",
    };
    a.str(EXPR_NAME, name);
    a.nest(EXPR_DATA, |a| match e {
        Expr::Meta { key, dreg } => {
            a.u32(1, *dreg);
            a.u32(2, *key as u32);
        }
        Expr::MetaSet { key, sreg } => {
            a.u32(2, *key as u32);
            a.u32(3, *sreg);
        }
        Expr::Cmp { sreg, eq, data } => {
            a.u32(1, *sreg);
            a.u32(2, if *eq { 0 } else { 1 });
            a.nest(3, |a| a.bytes(DATA_VALUE, data));
        }
        Expr::Payload { base, offset, len, dreg } => {
            a.u32(1, *dreg);
            a.u32(2, *base as u32);
            a.u32(3, *offset);
            a.u32(4, *len);
        }
        Expr::Lookup { set, sreg, map } => {
            a.str(1, set);
            a.u32(2, *sreg);
            if *map {
                a.u32(3, 0);
            }
        }
        Expr::Jhash { sreg, len, modulus, seed, dreg } => {
            a.u32(1, *sreg);
            a.u32(2, *dreg);
            a.u32(3, *len);
            a.u32(4, *modulus);
            a.u32(5, *seed);
            a.u32(7, 0);
        }
        Expr::Immediate { dreg, data } => {
            a.u32(1, *dreg);
            a.nest(2, |a| a.bytes(DATA_VALUE, data));
        }
        Expr::Verdict(v) => {
            a.u32(1, 0);
            a.nest(2, |a| verdict_data(a, v));
        }
        Expr::CtState { dreg } => {
            a.u32(1, *dreg);
            a.u32(2, 0);
        }
        Expr::And { sreg, dreg, mask } => {
            a.u32(1, *sreg);
            a.u32(2, *dreg);
            a.u32(3, u32::try_from(mask.len()).unwrap_or(u32::MAX));
            a.nest(4, |a| a.bytes(DATA_VALUE, mask));
            a.nest(5, |a| a.bytes(DATA_VALUE, &vec![0; mask.len()]));
        }
        Expr::Counter => {}
    });
}

/// nlmsghdr (host order) + nfgenmsg + attributes (big-endian numbers), 4-byte aligned.
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
    described: Vec<String>,
    last_header: Option<usize>,
    set_id: u32,
}

impl Writer {
    fn message(
        &mut self,
        kind: u16,
        flags: u16,
        family: u8,
        res_id: u16,
        what: &str,
        body: impl FnOnce(&mut Self),
    ) {
        let start = self.buf.len();
        let seq = u32::try_from(self.described.len()).unwrap_or(u32::MAX);
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&[family, 0]);
        self.buf.extend_from_slice(&res_id.to_be_bytes());
        body(self);
        self.set_len(start);
        self.described.push(what.to_owned());
        if kind != BATCH_BEGIN {
            self.last_header = Some(start);
        }
    }

    fn set_len(&mut self, start: usize) {
        let len = u32::try_from(self.buf.len() - start).unwrap_or(u32::MAX);
        self.buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    }

    fn bytes(&mut self, kind: u16, data: &[u8]) {
        let len = u16::try_from(4 + data.len()).unwrap_or(u16::MAX);
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn u32(&mut self, kind: u16, value: u32) {
        self.bytes(kind, &value.to_be_bytes());
    }

    fn str(&mut self, kind: u16, value: &str) {
        let mut data = value.as_bytes().to_vec();
        data.push(0);
        self.bytes(kind, &data);
    }

    fn nest(&mut self, kind: u16, body: impl FnOnce(&mut Self)) {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        body(self);
        let len = u16::try_from(self.buf.len() - start).unwrap_or(u16::MAX);
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_replaces_the_table_and_only_its_last_message_asks_for_an_ack() {
        let t = Table {
            chains: vec![Chain { name: "c".into(), hook: None }],
            sets: Vec::new(),
            rules: vec![Rule { chain: "c".into(), exprs: vec![Expr::Counter, Expr::Verdict(Verdict::Drop)] }],
        };
        let b = batch(&[(Family::Inet, "t", Some(&t))]);
        let msgs = crate::nftables::decode::messages(&b.bytes).collect::<Result<Vec<_>, _>>().unwrap();
        let kinds: Vec<u16> = msgs.iter().map(|m| m.kind).collect();
        assert_eq!(
            kinds,
            vec![
                BATCH_BEGIN,
                Msg::NewTable.kind(),
                Msg::DelTable.kind(),
                Msg::NewTable.kind(),
                Msg::NewChain.kind(),
                Msg::NewRule.kind(),
                BATCH_END
            ]
        );
        let acked: Vec<u32> = msgs.iter().filter(|m| m.flags & NLM_F_ACK != 0).map(|m| m.seq).collect();
        assert_eq!(acked, vec![b.last()]);
        assert_eq!(b.describe(b.last()), "add rule inet t c");
        assert_eq!(msgs.iter().map(|m| m.seq).collect::<Vec<_>>(), (0..7).collect::<Vec<_>>());
        // Begin and end name the subsystem; the rest the table's family.
        assert_eq!((msgs[0].family, msgs[0].res_id), (0, NFNL_SUBSYS_NFTABLES));
        assert!(msgs[1..6].iter().all(|m| m.family == 1 && m.res_id == 0));
    }

    #[test]
    fn attributes_are_aligned_and_strings_terminated() {
        let mut w = Writer::default();
        w.str(1, "abc");
        w.u32(2, 0x0102_0304);
        assert_eq!(w.buf.len(), 8 + 8);
        assert_eq!(&w.buf[4..8], b"abc\0");
        assert_eq!(&w.buf[12..16], &[1, 2, 3, 4]);
        let mut w = Writer::default();
        w.nest(3, |w| w.bytes(1, &[9]));
        assert_eq!(u16::from_ne_bytes([w.buf[0], w.buf[1]]), 12);
        assert_eq!(u16::from_ne_bytes([w.buf[2], w.buf[3]]), 3 | NLA_F_NESTED);
    }

    #[test]
    fn big_sets_are_split_over_messages() {
        let elements = (0u32..600).map(|k| (k.to_ne_bytes().to_vec(), Some(Verdict::Accept))).collect();
        let t = Table {
            chains: Vec::new(),
            sets: vec![Set { name: "s".into(), key: super::super::KeyType::U32, map: true, elements }],
            rules: Vec::new(),
        };
        let b = batch(&[(Family::Inet, "t", Some(&t))]);
        let msgs = crate::nftables::decode::messages(&b.bytes).collect::<Result<Vec<_>, _>>().unwrap();
        let elems = msgs.iter().filter(|m| m.kind == Msg::NewSetElem.kind()).count();
        assert_eq!(elems, 3);
    }
}
