//! A fast reader for the plain YAML that `kubectl -o yaml` and people write: block
//! mappings and sequences, one-line flow collections, quoted and plain one-line scalars,
//! comments. It reads such a document about ten times faster than the general parser,
//! which matters for a static file of 100k Services.
//!
//! It never decides anything the general parser would decide otherwise: on any construct
//! outside that subset (anchors, aliases, tags, block scalars, multi-line scalars, complex
//! keys, a plain scalar that a YAML schema could read as anything but a string or a
//! decimal integer, a duplicate key, an error of any kind) it answers `None`, and the
//! caller parses the document with the general parser, which also words every error.
//! `tests::agrees_with_the_general_parser` holds it to that on generated documents.

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

mod de;
mod flow;
mod scalar;

use flow::Cursor;
use scalar::{Plain, plain_kind, plain_scalar};

/// The document `doc` (one document, without `---`) as a value, if it is in the subset
/// and its root is a mapping; `None` means: ask the general parser.
#[cfg(test)]
pub(crate) fn parse(doc: &str) -> Option<Value> {
    parse_node(doc).map(Node::into_value)
}

/// A document read by the fast reader: scalars borrow the text, mappings are vectors
/// sorted by key. Decoding an object straight from it (its `serde::Deserializer` reads
/// exactly as `&serde_json::Value` does) skips building a `Value`, which for a file of
/// 50k Services is most of the allocations of a read.
#[derive(Debug, PartialEq)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Str(Cow<'a, str>),
    Seq(Vec<Node<'a>>),
    /// Sorted by key, keys unique: the order in which a `serde_json::Map` visits them.
    Map(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl Node<'_> {
    /// The value the general path reads the same text as.
    pub(crate) fn into_value(self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(b),
            Node::Int(n) => Value::Number(Number::from(n)),
            Node::Str(s) => Value::String(s.into_owned()),
            Node::Seq(items) => Value::Array(items.into_iter().map(Node::into_value).collect()),
            Node::Map(entries) => Value::Object(
                entries.into_iter().map(|(k, v)| (k.into_owned(), v.into_value())).collect::<Map<_, _>>(),
            ),
        }
    }

    /// The string at `key` of a mapping.
    pub(crate) fn str_field(&self, key: &str) -> Option<&str> {
        match self {
            Node::Map(entries) => match entries.binary_search_by(|(k, _)| key_cmp(k, key)) {
                Ok(i) => match &entries[i].1 {
                    Node::Str(s) => Some(s),
                    _ => None,
                },
                Err(_) => None,
            },
            _ => None,
        }
    }
}

/// `a.cmp(b)`, the first bytes compared in line and the rest only on a tie: a document's
/// keys nearly always differ in their first byte, where `str::cmp` calls `memcmp` for
/// every pair (12-15 % of the cycles of reading a 50k-Service file went to it).
#[inline]
pub(crate) fn key_cmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    match a.first().cmp(&b.first()) {
        Ordering::Equal => a.cmp(b),
        first => first,
    }
}

/// Sorts a mapping's entries by key; `None` on a duplicate key (the general parser's
/// business: it words the error).
fn sorted<'a>(mut entries: Vec<(Cow<'a, str>, Node<'a>)>) -> Option<Node<'a>> {
    entries.sort_unstable_by(|a, b| key_cmp(&a.0, &b.0));
    if entries.windows(2).any(|w| key_cmp(&w[0].0, &w[1].0).is_eq()) {
        return None;
    }
    Some(Node::Map(entries))
}

/// The document `doc` as a [`Node`], if it is in the subset and its root is a mapping;
/// `None` means: ask the general parser.
pub(crate) fn parse_node(doc: &str) -> Option<Node<'_>> {
    if !plain_characters(doc) {
        return None;
    }
    let mut lines = Vec::with_capacity(doc.len() / 16);
    let mut from = 0;
    let breaks = memchr::memchr_iter(b'\n', doc.as_bytes()).chain(std::iter::once(doc.len()));
    for to in breaks {
        let raw = &doc[from..to];
        from = to + 1;
        let raw = if ends_with(raw, b'\r') { &raw[..raw.len() - 1] } else { raw };
        let text = raw.trim_start_matches(' ');
        if text.is_empty() || starts_with(text, b'#') {
            continue;
        }
        let indent = raw.len() - text.len();
        let bytes = text.as_bytes();
        if matches!(bytes[0], b'\t' | b'%')
            || (indent == 0 && bytes.len() >= 3 && matches!(&bytes[..3], b"---" | b"..."))
        {
            return None;
        }
        lines.push(Line { indent, text: text.trim_end_matches([' ', '\t']) });
    }
    let first = lines.first()?;
    if is_sequence_item(first.text) {
        return None;
    }
    let mut p = Parser { lines, at: 0, depth: 0 };
    let indent = p.lines[0].indent;
    let root = p.mapping(indent)?;
    (p.at == p.lines.len()).then_some(root)
}

/// No tab (a separator the subset does not read), no character YAML forbids, no byte
/// order mark, no line break but `\n` and `\r\n`.
fn plain_characters(doc: &str) -> bool {
    // YAML reads a lone CR as a line break too (1.2 §5.4), but lines are split at LF only.
    let bytes = doc.as_bytes();
    if memchr::memchr_iter(b'\r', bytes).any(|i| bytes.get(i + 1) != Some(&b'\n')) {
        return false;
    }
    let ascii_ok = |b: u8| b >= 0x20 && b != 0x7f || b == b'\n' || b == b'\r';
    if doc.is_ascii() {
        return doc.bytes().all(ascii_ok);
    }
    doc.chars().all(|c| match u32::from(c) {
        0..=0x7f => ascii_ok(c as u8),
        0x80..=0x9f | 0x2028 | 0x2029 | 0xfeff | 0xfffe | 0xffff => false,
        _ => true,
    })
}

/// Deeper nesting goes to the general parser, which has its own limits.
const MAX_DEPTH: usize = 64;

#[derive(Clone, Copy)]
struct Line<'a> {
    indent: usize,
    text: &'a str,
}

struct Parser<'a> {
    lines: Vec<Line<'a>>,
    at: usize,
    depth: usize,
}

/// Whether `s` starts with the ASCII byte `b`: compared in line, where a `char` pattern
/// calls `memcmp` for its one byte (every line of a big file passes several of these).
#[inline]
fn starts_with(s: &str, b: u8) -> bool {
    s.as_bytes().first() == Some(&b)
}

/// Whether `s` ends with the ASCII byte `b` (see [`starts_with`]).
#[inline]
fn ends_with(s: &str, b: u8) -> bool {
    s.as_bytes().last() == Some(&b)
}

fn is_sequence_item(text: &str) -> bool {
    matches!(text.as_bytes(), [b'-'] | [b'-', b' ', ..])
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Line<'a>> {
        self.lines.get(self.at).copied()
    }

    /// The block node that starts on the current line, more indented than `parent`; or,
    /// for a mapping value, a sequence at the parent's own indentation (`compact`).
    fn block(&mut self, parent: usize, compact: bool) -> Option<Node<'a>> {
        let Some(line) = self.peek() else { return Some(Node::Null) };
        let seq = is_sequence_item(line.text);
        if line.indent > parent || (compact && seq && line.indent == parent) {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return None;
            }
            let node = if seq { self.sequence(line.indent) } else { self.mapping(line.indent) };
            self.depth -= 1;
            node
        } else {
            Some(Node::Null)
        }
    }

    fn mapping(&mut self, indent: usize) -> Option<Node<'a>> {
        let mut map = Vec::new();
        while let Some(line) = self.peek() {
            if line.indent < indent {
                break;
            }
            if line.indent > indent || is_sequence_item(line.text) {
                return None;
            }
            let (key, rest) = split_key(line.text)?;
            self.at += 1;
            let value = if rest.is_empty() {
                self.block(indent, true)?
            } else {
                let v = inline_value(rest)?;
                // A more indented line would continue a multi-line scalar (or be an error).
                if self.peek().is_some_and(|next| next.indent > indent) {
                    return None;
                }
                v
            };
            map.push((key, value));
        }
        sorted(map)
    }

    fn sequence(&mut self, indent: usize) -> Option<Node<'a>> {
        let mut items = Vec::new();
        while let Some(line) = self.peek() {
            if line.indent < indent || (line.indent == indent && !is_sequence_item(line.text)) {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let after_dash = &line.text[1..];
            let rest = after_dash.trim_start_matches(' ');
            if rest.is_empty() || starts_with(rest, b'#') {
                self.at += 1;
                items.push(self.block(indent, false)?);
                continue;
            }
            if is_sequence_item(rest) {
                return None;
            }
            let column = indent + 1 + (after_dash.len() - rest.len());
            if split_key(rest).is_some() {
                // `- key: value`: a mapping whose first line starts after the dash.
                self.lines[self.at] = Line { indent: column, text: rest };
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return None;
                }
                items.push(self.mapping(column)?);
                self.depth -= 1;
                continue;
            }
            self.at += 1;
            items.push(inline_value(rest)?);
            if self.peek().is_some_and(|next| next.indent > indent) {
                return None;
            }
        }
        Some(Node::Seq(items))
    }
}

/// `key: rest` → (key, rest without leading spaces and without a comment), for a plain
/// or quoted key that can only be read as a string.
fn split_key(text: &str) -> Option<(Cow<'_, str>, &str)> {
    let (key, after) = if let Some(quote @ (b'"' | b'\'')) = text.as_bytes().first().copied() {
        let mut cursor = Cursor { s: text, at: 0 };
        let key = if quote == b'"' { cursor.double_quoted()? } else { cursor.single_quoted()? };
        (key, &text[cursor.at..])
    } else {
        let colon = find_key_colon(text)?;
        let key = &text[..colon];
        if ends_with(key, b' ') || !matches!(plain_kind(key)?, Plain::Str) {
            return None;
        }
        (Cow::Borrowed(key), &text[colon..])
    };
    if !starts_with(after, b':') {
        return None;
    }
    let rest = &after[1..];
    if !(rest.is_empty() || starts_with(rest, b' ')) {
        return None;
    }
    let rest = rest.trim_start_matches(' ');
    Some((key, if starts_with(rest, b'#') { "" } else { rest }))
}

/// Where the `:` that ends a plain key is: the first `:` followed by a space or the end.
fn find_key_colon(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b':' if i + 1 == bytes.len() || bytes[i + 1] == b' ' => return Some(i),
            b'#' if i > 0 && bytes[i - 1] == b' ' => return None,
            _ => {}
        }
        i += 1;
    }
    None
}

/// A value that fits on the rest of its line: a quoted or plain scalar or a flow
/// collection, followed by nothing but a comment.
fn inline_value(rest: &str) -> Option<Node<'_>> {
    match rest.as_bytes()[0] {
        b'"' | b'\'' | b'[' | b'{' => {
            let mut cursor = Cursor { s: rest, at: 0 };
            let value = cursor.flow_node(0)?;
            let after = &cursor.s[cursor.at..];
            let tail = after.trim_start_matches(' ');
            // A comment must be set off by a space: `'a'#b` is an error in YAML.
            (tail.is_empty() || (tail.starts_with('#') && tail.len() < after.len())).then_some(value)
        }
        _ => {
            // One pass (this runs for every value of a big file): the text ends at a
            // comment (` #`); a `: ` or a final `:` before it would make it a mapping.
            let bytes = rest.as_bytes();
            let mut end = bytes.len();
            for (i, &b) in bytes.iter().enumerate() {
                match b {
                    b'#' if i > 0 && bytes[i - 1] == b' ' => {
                        end = i;
                        break;
                    }
                    b':' if bytes.get(i + 1).is_none_or(|&next| next == b' ') => return None,
                    _ => {}
                }
            }
            plain_scalar(rest[..end].trim_end_matches(' '))
        }
    }
}

#[cfg(test)]
mod tests;
