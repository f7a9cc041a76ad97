//! What differs between two sorted maps, found in one ordered walk of each and no copy
//! of either: the speaker's plans and a session's routes are as large as the number of
//! Services (10 000 and more) while a change touches one.

use std::collections::BTreeMap;

/// Calls `out` with every key in one map and not the other, or with different values.
pub fn differing<K: Ord, V: PartialEq>(a: &BTreeMap<K, V>, b: &BTreeMap<K, V>, out: impl FnMut(&K)) {
    walk(a, b, |x, y| x == y, out);
}

/// Calls `out` with every key in one map and not the other.
pub fn differing_keys<K: Ord, V>(a: &BTreeMap<K, V>, b: &BTreeMap<K, V>, out: impl FnMut(&K)) {
    walk(a, b, |_, _| true, out);
}

/// Calls `out` with every key in one map and not the other, or in both where `same`
/// says their values differ.
pub fn walk<K: Ord, V>(
    a: &BTreeMap<K, V>,
    b: &BTreeMap<K, V>,
    same: impl Fn(&V, &V) -> bool,
    mut out: impl FnMut(&K),
) {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let (mut a, mut b) = (a.iter().peekable(), b.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => return,
            (Some((k, _)), None) => {
                out(k);
                a.next();
            }
            (None, Some((k, _))) => {
                out(k);
                b.next();
            }
            (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                Less => {
                    out(ka);
                    a.next();
                }
                Greater => {
                    out(kb);
                    b.next();
                }
                Equal => {
                    if !same(va, vb) {
                        out(ka);
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_finds_exactly_the_keys_that_differ() {
        let a = BTreeMap::from([(1, 'a'), (2, 'b'), (4, 'd'), (9, 'z')]);
        let b = BTreeMap::from([(0, 'x'), (2, 'b'), (4, 'e'), (5, 'f')]);
        let mut found = Vec::new();
        differing(&a, &b, |k| found.push(*k));
        assert_eq!(found, vec![0, 1, 4, 5, 9]);
        found.clear();
        differing_keys(&a, &b, |k| found.push(*k));
        assert_eq!(found, vec![0, 1, 5, 9]);
        found.clear();
        walk(&a, &a, |_, _| false, |k| found.push(*k));
        assert_eq!(found, vec![1, 2, 4, 9], "equal keys are judged by `same`");
    }
}
