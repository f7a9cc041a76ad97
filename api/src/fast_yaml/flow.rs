//! One-line flow collections (`[a, b]`, `{a: 1}`) and quoted scalars.

use std::borrow::Cow;

use super::scalar::plain_scalar;
use super::{MAX_DEPTH, Node, sorted};

/// A flow collection or quoted scalar on one line.
pub(super) struct Cursor<'a> {
    pub(super) s: &'a str,
    pub(super) at: usize,
}

impl<'a> Cursor<'a> {
    fn skip_spaces(&mut self) {
        while self.s.as_bytes().get(self.at) == Some(&b' ') {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.s.as_bytes().get(self.at) == Some(&b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn flow_node(&mut self, depth: usize) -> Option<Node<'a>> {
        if depth > MAX_DEPTH {
            return None;
        }
        match *self.s.as_bytes().get(self.at)? {
            b'"' => self.double_quoted().map(Node::Str),
            b'\'' => self.single_quoted().map(Node::Str),
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_spaces();
                if self.eat(b']') {
                    return Some(Node::Seq(items));
                }
                loop {
                    self.skip_spaces();
                    items.push(self.flow_node(depth + 1)?);
                    self.skip_spaces();
                    if self.eat(b']') {
                        return Some(Node::Seq(items));
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            b'{' => {
                self.at += 1;
                let mut map = Vec::new();
                self.skip_spaces();
                if self.eat(b'}') {
                    return Some(Node::Map(map));
                }
                loop {
                    self.skip_spaces();
                    let key = match self.flow_node(depth + 1)? {
                        Node::Str(k) => k,
                        _ => return None,
                    };
                    if !self.eat(b':') || !self.eat(b' ') {
                        return None;
                    }
                    self.skip_spaces();
                    let value = self.flow_node(depth + 1)?;
                    map.push((key, value));
                    self.skip_spaces();
                    if self.eat(b'}') {
                        return sorted(map);
                    }
                    if !self.eat(b',') {
                        return None;
                    }
                }
            }
            _ => {
                let rest = &self.s[self.at..];
                // Bytes, not chars: every stop is ASCII, which no multi-byte character contains.
                let end = rest
                    .bytes()
                    .position(|b| matches!(b, b',' | b'[' | b']' | b'{' | b'}' | b':' | b'#'))
                    .unwrap_or(rest.len());
                let text = rest[..end].trim_end_matches(' ');
                self.at += text.len();
                plain_scalar(text)
            }
        }
    }

    /// `"…"` with the common escapes; anything rarer goes to the general parser.
    pub(super) fn double_quoted(&mut self) -> Option<Cow<'a, str>> {
        let bytes = self.s.as_bytes();
        let start = self.at + 1;
        let mut out = String::new();
        let mut i = start;
        let mut run = start;
        loop {
            match *bytes.get(i)? {
                b'"' => {
                    self.at = i + 1;
                    if run == start {
                        return Some(Cow::Borrowed(&self.s[start..i]));
                    }
                    out.push_str(&self.s[run..i]);
                    return Some(Cow::Owned(out));
                }
                b'\\' => {
                    out.push_str(&self.s[run..i]);
                    let c = match *bytes.get(i + 1)? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'n' => '\n',
                        b't' => '\t',
                        b'r' => '\r',
                        b'u' => {
                            let hex = self.s.get(i + 2..i + 6)?;
                            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                                return None;
                            }
                            let c = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
                            i += 4;
                            c
                        }
                        _ => return None,
                    };
                    out.push(c);
                    i += 2;
                    run = i;
                }
                _ => i += 1,
            }
        }
    }

    /// `'…'`, where `''` is a quote.
    pub(super) fn single_quoted(&mut self) -> Option<Cow<'a, str>> {
        let bytes = self.s.as_bytes();
        let mut out = String::new();
        let start = self.at + 1;
        let mut i = start;
        let mut run = i;
        loop {
            if *bytes.get(i)? == b'\'' {
                if bytes.get(i + 1) == Some(&b'\'') {
                    out.push_str(&self.s[run..=i]);
                    i += 2;
                    run = i;
                } else {
                    self.at = i + 1;
                    if run == start {
                        return Some(Cow::Borrowed(&self.s[start..i]));
                    }
                    out.push_str(&self.s[run..i]);
                    return Some(Cow::Owned(out));
                }
            } else {
                i += 1;
            }
        }
    }
}
