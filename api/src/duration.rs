//! Durations as users write them (`90s`, `1m30s`, `300ms`), Go `time.ParseDuration` style.

use std::fmt;
use std::str::FromStr;

/// Longest duration string the CRD admits and the parser reads: it bounds the cost of
/// the CEL rules that read durations; longer values overflow or are padded nonsense.
pub const DURATION_MAX_LEN: usize = 24;

/// A parsed API duration; `Display` prints a form that parses back to the same value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub std::time::Duration);

/// Why a duration string did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string was empty.
    #[error("empty duration; write e.g. \"90s\", \"1m\" or \"300ms\"")]
    Empty,
    /// A number was not followed by a unit, or the unit is unknown.
    #[error("{0:?} is not a duration; use a number followed by ns, us, ms, s, m or h, e.g. \"90s\"")]
    Malformed(String),
    /// Negative durations mean nothing in this API.
    #[error("{0:?} is negative; durations must be zero or more")]
    Negative(String),
    /// The value does not fit.
    #[error("{0:?} is too large")]
    Overflow(String),
    /// Longer than [`DURATION_MAX_LEN`] characters (the CRD's `maxLength`).
    #[error("{0:?} is longer than 24 characters")]
    TooLong(String),
}

impl Duration {
    /// Builds from whole seconds.
    pub const fn from_secs(s: u64) -> Self {
        Self(std::time::Duration::from_secs(s))
    }

    /// Builds from whole milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Self(std::time::Duration::from_millis(ms))
    }

    /// The standard library value.
    pub const fn std(self) -> std::time::Duration {
        self.0
    }
}

impl From<Duration> for std::time::Duration {
    fn from(d: Duration) -> Self {
        d.0
    }
}

impl FromStr for Duration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // No trimming: the CRD pattern, which must accept exactly what parses, has no spaces.
        if s.is_empty() {
            return Err(DurationError::Empty);
        }
        if s.chars().count() > DURATION_MAX_LEN {
            return Err(DurationError::TooLong(s.to_owned()));
        }
        if s.starts_with('-') {
            return Err(DurationError::Negative(s.to_owned()));
        }
        let body = s.strip_prefix('+').unwrap_or(s);
        // Go accepts a bare "0"; everything else needs a unit so "90" is not silently ns or s.
        if body == "0" {
            return Ok(Self::default());
        }
        let malformed = || DurationError::Malformed(s.to_owned());
        let overflow = || DurationError::Overflow(s.to_owned());
        let mut total: u128 = 0; // nanoseconds
        let mut rest = body;
        while !rest.is_empty() {
            let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(malformed)?;
            let (num, tail) = rest.split_at(num_len);
            let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
            let (unit, next) = tail.split_at(unit_len);
            let unit_ns: u128 = match unit {
                "ns" => 1,
                "us" | "µs" | "μs" => 1_000,
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60_000_000_000,
                "h" => 3_600_000_000_000,
                _ => return Err(malformed()),
            };
            let (int_part, frac_part) = match num.split_once('.') {
                Some((i, f)) => (i, f),
                None => (num, ""),
            };
            if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
                return Err(malformed());
            }
            let int: u128 = if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| overflow())? };
            let mut value = int.checked_mul(unit_ns).ok_or_else(overflow)?;
            let mut scale = unit_ns;
            for d in frac_part.chars() {
                scale /= 10;
                let digit = u128::from(d.to_digit(10).ok_or_else(malformed)?);
                value = value.checked_add(digit * scale).ok_or_else(overflow)?;
            }
            total = total.checked_add(value).ok_or_else(overflow)?;
            rest = next;
        }
        let secs = u64::try_from(total / 1_000_000_000).map_err(|_| overflow())?;
        // The remainder is below 1e9 so it always fits.
        let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| overflow())?;
        Ok(Self(std::time::Duration::new(secs, nanos)))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        let nanos = d.subsec_nanos();
        if nanos == 0 {
            write!(f, "{}s", d.as_secs())
        } else if nanos.is_multiple_of(1_000_000) {
            write!(f, "{}ms", d.as_millis())
        } else if nanos.is_multiple_of(1_000) {
            write!(f, "{}us", d.as_micros())
        } else {
            write!(f, "{}ns", d.as_nanos())
        }
    }
}

/// Serialized as the API writes durations (`"90s"`), for components' own config types.
impl serde::Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Duration, DurationError> {
        s.parse()
    }

    #[test]
    fn parses_api_examples() {
        assert_eq!(p("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(p("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(p("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(p("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(p("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(p("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(p("0"), Ok(Duration::default()));
        assert_eq!(p("0s"), Ok(Duration::default()));
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(p(""), Err(DurationError::Empty));
        assert!(matches!(p("90"), Err(DurationError::Malformed(_))));
        assert!(matches!(p("s"), Err(DurationError::Malformed(_))));
        assert!(matches!(p("5 days"), Err(DurationError::Malformed(_))));
        assert!(matches!(p("1.2.3s"), Err(DurationError::Malformed(_))));
        assert!(matches!(p("-1s"), Err(DurationError::Negative(_))));
        assert!(matches!(p("999999999999999999999999h"), Err(DurationError::TooLong(_))));
        assert!(matches!(p("99999999999999999999999h"), Err(DurationError::Overflow(_))));
        assert!(matches!(p(" 90s"), Err(DurationError::Malformed(_))));
    }

    #[test]
    fn serde_as_string() {
        let d: Duration = serde_json::from_str("\"1m30s\"").unwrap();
        assert_eq!(d, Duration::from_secs(90));
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"90s\"");
        assert!(serde_json::from_str::<Duration>("\"90\"").is_err());
    }

    #[test]
    fn display_round_trips() {
        for s in ["90s", "300ms", "1500ms", "7us", "3ns", "0s"] {
            let d = p(s).unwrap();
            assert_eq!(d.to_string(), s);
            assert_eq!(p(&d.to_string()), Ok(d));
        }
    }
}
