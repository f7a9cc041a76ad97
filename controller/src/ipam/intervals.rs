//! A set of u128 values stored as disjoint, non-adjacent inclusive intervals.
//!
//! Every operation is O(log n) in the number of intervals, independent of how many
//! values the intervals cover, so an IPv6 /64 costs no more than a /30.

use std::collections::BTreeMap;

/// Disjoint inclusive intervals `start -> end`, with neighbours always merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct IntervalSet {
    map: BTreeMap<u128, u128>,
    /// Number of values held; saturates only for the full 2^128 space (`::/0`).
    len: u128,
}

fn span(start: u128, end: u128) -> u128 {
    (end - start).saturating_add(1)
}

impl IntervalSet {
    /// Adds `start..=end` (which may overlap what is already held).
    pub(crate) fn insert(&mut self, start: u128, end: u128) {
        let (mut lo, mut hi) = (start, end);
        let mut removed: u128 = 0;
        // Intervals that overlap or touch [start, end] are contiguous in key order: walk back
        // from the last one starting at or before end+1.
        let mut absorbed = Vec::new();
        for (&s, &e) in self.map.range(..=end.saturating_add(1)).rev() {
            if e < start.saturating_sub(1) {
                break;
            }
            absorbed.push(s);
            lo = lo.min(s);
            hi = hi.max(e);
            removed = removed.saturating_add(span(s, e));
        }
        for s in absorbed {
            self.map.remove(&s);
        }
        self.map.insert(lo, hi);
        self.len = self.len.saturating_sub(removed).saturating_add(span(lo, hi));
    }

    /// Removes one value; returns whether it was held.
    pub(crate) fn remove(&mut self, x: u128) -> bool {
        let Some((&s, &e)) = self.map.range(..=x).next_back() else {
            return false;
        };
        if e < x {
            return false;
        }
        self.map.remove(&s);
        if s < x {
            self.map.insert(s, x - 1);
        }
        if x < e {
            self.map.insert(x + 1, e);
        }
        self.len = self.len.saturating_sub(1);
        true
    }

    /// Whether `x` is held.
    pub(crate) fn contains(&self, x: u128) -> bool {
        self.map.range(..=x).next_back().is_some_and(|(_, &e)| x <= e)
    }

    /// The lowest value held.
    pub(crate) fn first(&self) -> Option<u128> {
        self.map.first_key_value().map(|(&s, _)| s)
    }

    /// How many values are held.
    pub(crate) fn len(&self) -> u128 {
        self.len
    }

    /// The intervals, in order.
    #[cfg(test)]
    pub(crate) fn intervals(&self) -> impl Iterator<Item = (u128, u128)> + '_ {
        self.map.iter().map(|(&s, &e)| (s, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn merges_and_splits() {
        let mut s = IntervalSet::default();
        s.insert(10, 20);
        s.insert(22, 30);
        assert_eq!(s.intervals().count(), 2);
        s.insert(21, 21);
        assert_eq!(s.intervals().collect::<Vec<_>>(), vec![(10, 30)]);
        assert_eq!(s.len(), 21);
        assert!(s.remove(15));
        assert!(!s.remove(15));
        assert_eq!(s.intervals().collect::<Vec<_>>(), vec![(10, 14), (16, 30)]);
        assert_eq!(s.first(), Some(10));
        s.insert(0, 100);
        assert_eq!(s.intervals().collect::<Vec<_>>(), vec![(0, 100)]);
        assert_eq!(s.len(), 101);
    }

    #[test]
    fn handles_the_edges_of_u128() {
        let mut s = IntervalSet::default();
        s.insert(u128::MAX - 1, u128::MAX);
        s.insert(0, 0);
        assert_eq!(s.len(), 3);
        assert!(s.remove(u128::MAX));
        assert!(s.remove(0));
        assert_eq!(s.intervals().collect::<Vec<_>>(), vec![(u128::MAX - 1, u128::MAX - 1)]);
        s.insert(0, u128::MAX);
        assert_eq!(s.len(), u128::MAX, "the full space saturates");
    }

    proptest! {
        #[test]
        fn matches_a_naive_set(ops in proptest::collection::vec((any::<bool>(), 0u128..64, 0u128..8), 0..64)) {
            let mut s = IntervalSet::default();
            let mut naive = BTreeSet::new();
            for (insert, a, w) in ops {
                if insert {
                    s.insert(a, a + w);
                    naive.extend(a..=a + w);
                } else {
                    prop_assert_eq!(s.remove(a), naive.remove(&a));
                }
                prop_assert_eq!(s.len(), naive.len() as u128);
                prop_assert_eq!(s.first(), naive.first().copied());
                let flat: BTreeSet<u128> = s.intervals().flat_map(|(a, b)| a..=b).collect();
                prop_assert_eq!(&flat, &naive);
                // Never two touching intervals: merging is what keeps lookups O(log n).
                let iv: Vec<_> = s.intervals().collect();
                for w in iv.windows(2) {
                    prop_assert!(w[0].1 + 1 < w[1].0);
                }
            }
        }
    }
}
