//! Go's duration syntax (`time.ParseDuration`), which every istiod flag,
//! environment variable and Istio config duration uses: `100ms`, `10s`, `1h30m`,
//! `1.5h`, `0`. Units: `ns`, `us` (or `µs`, `μs`), `ms`, `s`, `m`, `h`.
//! Negative durations are rejected: no istiod knob means anything by them.

use std::fmt;
use std::time::Duration;

/// Why a duration string did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (expected Go syntax such as 100ms, 10s, 1h30m)")]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

/// Parses a Go duration string into a [`Duration`].
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError { input: input.to_owned(), reason };
    let mut s = input;
    if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    } else if let Some(rest) = s.strip_prefix('-') {
        // Go accepts "-0"; anything else negative is meaningless here.
        if !rest.is_empty() && rest.chars().all(|c| c == '0') {
            return Ok(Duration::ZERO);
        }
        return Err(err("negative durations are not allowed"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(err("empty"));
    }
    let mut total_nanos: u128 = 0;
    while !s.is_empty() {
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let (int_part, rest) = s.split_at(int_len);
        let (frac_part, rest) = match rest.strip_prefix('.') {
            Some(r) => {
                let n = r.bytes().take_while(u8::is_ascii_digit).count();
                r.split_at(n)
            }
            None => ("", rest),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(err("expected a number"));
        }
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let (unit, rest) = rest.split_at(unit_len);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(err("missing unit")),
            _ => return Err(err("unknown unit")),
        };
        let whole: u128 =
            if int_part.is_empty() { 0 } else { int_part.parse().map_err(|_| err("number too large"))? };
        let mut nanos = whole.checked_mul(scale).ok_or_else(|| err("overflow"))?;
        // Fractional digits beyond nanosecond precision are truncated, as Go does.
        let mut place = scale;
        for d in frac_part.bytes() {
            place /= 10;
            if place == 0 {
                break;
            }
            nanos += u128::from(d - b'0') * place;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(|| err("overflow"))?;
        s = rest;
    }
    // Go's time.Duration is an int64 of nanoseconds.
    if total_nanos > i64::MAX as u128 {
        return Err(err("overflow"));
    }
    let secs = (total_nanos / 1_000_000_000) as u64;
    let sub = (total_nanos % 1_000_000_000) as u32;
    Ok(Duration::new(secs, sub))
}

/// Formats a duration the way Go's `Duration.String` does (`1h30m0s`,
/// `100ms`, `0s`), so `/debug` output and logs read like istiod's.
pub struct GoDuration(pub Duration);

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        let nanos = d.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        if nanos < 1_000 {
            return write!(f, "{nanos}ns");
        }
        if nanos < 1_000_000 {
            return write_frac(f, nanos, 1_000, "µs");
        }
        if nanos < 1_000_000_000 {
            return write_frac(f, nanos, 1_000_000, "ms");
        }
        let total_secs = d.as_secs();
        let (h, m) = (total_secs / 3600, (total_secs / 60) % 60);
        if h > 0 {
            write!(f, "{h}h")?;
        }
        if h > 0 || m > 0 {
            write!(f, "{m}m")?;
        }
        write_frac(f, u128::from(total_secs % 60) * 1_000_000_000 + u128::from(d.subsec_nanos()), 1_000_000_000, "s")
    }
}

fn write_frac(f: &mut fmt::Formatter<'_>, v: u128, unit: u128, suffix: &str) -> fmt::Result {
    let whole = v / unit;
    let frac = v % unit;
    if frac == 0 {
        return write!(f, "{whole}{suffix}");
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    write!(f, "{whole}.{}{suffix}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn parses_go_syntax() {
        assert_eq!(parse("100ms"), Ok(ms(100)));
        assert_eq!(parse("10s"), Ok(ms(10_000)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse(".5s"), Ok(ms(500)));
        assert_eq!(parse("2h45m30.5s"), Ok(Duration::from_millis(9_930_500)));
        assert_eq!(parse("1us"), Ok(Duration::from_micros(1)));
        assert_eq!(parse("1µs"), Ok(Duration::from_micros(1)));
        assert_eq!(parse("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("+5s"), Ok(ms(5000)));
        assert_eq!(parse("-0"), Ok(Duration::ZERO));
        assert_eq!(parse("1.0000000001s"), Ok(ms(1000)), "sub-ns digits truncate");
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "10", "s", "1.s.", "1x", "1h-5m", "-1s", "1e3s", ".s", "9223372036854775808ns"] {
            assert!(parse(bad).is_err(), "{bad:?} should not parse");
        }
        let e = parse("100 ms").unwrap_err().to_string();
        assert!(e.contains("\"100 ms\""), "{e}");
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (Duration::ZERO, "0s"),
            (ms(100), "100ms"),
            (ms(10_000), "10s"),
            (Duration::from_secs(5400), "1h30m0s"),
            (ms(1500), "1.5s"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_nanos(999), "999ns"),
            (Duration::from_secs(24 * 3600), "24h0m0s"),
        ];
        for (d, want) in cases {
            assert_eq!(GoDuration(d).to_string(), want);
            assert_eq!(parse(want), Ok(d), "round trip {want}");
        }
    }
}
