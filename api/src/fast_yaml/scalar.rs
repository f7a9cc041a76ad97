//! Plain scalars: what a YAML schema reads them as, where every schema agrees.

use std::borrow::Cow;

use super::Node;

/// A plain scalar, resolved the way every YAML schema agrees on: decimal integers,
/// `true`, `false`, `null` and `~` are themselves, addresses and prefixes are strings,
/// and anything that some schema would read as a number, boolean, null or timestamp is
/// left to the general parser.
pub(super) fn plain_scalar(s: &str) -> Option<Node<'_>> {
    Some(match plain_kind(s)? {
        Plain::Bool(b) => Node::Bool(b),
        Plain::Null => Node::Null,
        Plain::Int(n) => Node::Int(n),
        Plain::Str => Node::Str(Cow::Borrowed(s)),
    })
}

/// What a plain scalar reads as, without building it (keys are only checked).
pub(super) enum Plain {
    Bool(bool),
    Null,
    Int(i64),
    Str,
}

pub(super) fn plain_kind(s: &str) -> Option<Plain> {
    let first = *s.as_bytes().first()?;
    if first.is_ascii_alphabetic() {
        // Most keys and values: no number or timestamp starts with a letter, so only
        // the words below are not strings (the general branch finds the same).
        return match s {
            "true" => Some(Plain::Bool(true)),
            "false" => Some(Plain::Bool(false)),
            "null" => Some(Plain::Null),
            _ if schema_word(s) => None,
            _ => Some(Plain::Str),
        };
    }
    if b"-?:,[]{}#&*!|>'\"%@`".contains(&first) && !(first == b'-' && s.len() > 1 && s.as_bytes()[1] != b' ')
    {
        return None;
    }
    match s {
        "true" => return Some(Plain::Bool(true)),
        "false" => return Some(Plain::Bool(false)),
        "null" | "~" => return Some(Plain::Null),
        _ => {}
    }
    if s.len() <= 9 {
        // Lower-cased on the stack: most keys and short values pass here.
        let mut buf = [0u8; 9];
        let buf = &mut buf[..s.len()];
        buf.copy_from_slice(s.as_bytes());
        buf.make_ascii_lowercase();
        let lower = std::str::from_utf8(buf).unwrap_or("");
        let lower = lower.trim_start_matches(['+', '-', '.']);
        if matches!(
            lower,
            "y" | "n"
                | "yes"
                | "no"
                | "on"
                | "off"
                | "true"
                | "false"
                | "null"
                | "nan"
                | "inf"
                | "infinity"
                | "="
                | "<<"
        ) {
            return None;
        }
    }
    if first.is_ascii_digit() || matches!(first, b'+' | b'-' | b'.') {
        let digits = s.strip_prefix('-').unwrap_or(s);
        if digits == "0" && digits.len() < s.len() {
            return None;
        }
        if !digits.is_empty()
            && digits.len() <= 18
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'))
        {
            let n: i64 = s.parse().ok()?;
            return Some(Plain::Int(n));
        }
        if is_address_or_prefix(s) {
            return Some(Plain::Str);
        }
        // Every YAML 1.1 or 1.2 int or float: a radix prefix, or nothing but digits,
        // signs, `_`, `.`, `:` (sexagesimal) and an exponent's `e`.
        let unsigned = s.trim_start_matches(['+', '-']).as_bytes();
        if unsigned.len() > 1 && unsigned[0] == b'0' && b"xXoObB".contains(&unsigned[1])
            || unsigned.iter().all(|b| b"0123456789_.:eE+-".contains(b))
        {
            return None;
        }
        // A timestamp (`2001-12-14t21:59:43.10-05:00`), in any schema that has them.
        if s.len() >= 10 && s.as_bytes()[4] == b'-' && s.as_bytes()[..4].iter().all(u8::is_ascii_digit) {
            return None;
        }
    } else if first == b'.' {
        return None;
    }
    Some(Plain::Str)
}

/// A word that starts with a letter and some YAML schema reads as a boolean, null or
/// float, in any case (`Yes`, `OFF`, `NaN`, `Infinity`).
fn schema_word(s: &str) -> bool {
    const WORDS: [&str; 12] =
        ["y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf", "infinity"];
    s.len() <= 8 && WORDS.iter().any(|w| w.len() == s.len() && w.eq_ignore_ascii_case(s))
}

fn is_address_or_prefix(s: &str) -> bool {
    let addr =
        s.split_once('/').map_or(s, |(a, len)| if len.bytes().all(|b| b.is_ascii_digit()) { a } else { "" });
    addr.parse::<std::net::IpAddr>().is_ok()
}
