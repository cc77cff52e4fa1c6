//! Wall-clock times as istiod's JSON shows them (Go's `time.Time`,
//! RFC 3339 in UTC).

use std::time::{Instant, SystemTime};

/// `t` as RFC 3339 in UTC with microseconds, e.g.
/// `2026-11-18T11:06:40.123456Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let (secs, micros) = (d.as_secs() as i64, d.subsec_micros());
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `t` as Go's `time.RFC3339Nano` in UTC: nanoseconds with trailing
/// zeros cut (and the dot, when none are left), e.g.
/// `2026-11-18T11:06:40.1234Z`.
pub fn rfc3339_nano(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let micros = rfc3339(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(d.as_secs()));
    let seconds = &micros[..micros.len() - 8]; // less ".000000Z"
    let nanos = format!("{:09}", d.subsec_nanos());
    let nanos = nanos.trim_end_matches('0');
    if nanos.is_empty() { format!("{seconds}Z") } else { format!("{seconds}.{nanos}Z") }
}

/// Reads an RFC 3339 time (`2006-01-02T15:04:05[.frac](Z|+07:00)`), as Go's
/// `time.Parse(time.RFC3339Nano, ...)` accepts it.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes().all(|c| c.is_ascii_digit()).then(|| t.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0i64;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = s.get(start..i).filter(|f| !f.is_empty() && f.len() <= 9)?;
        nanos = frac.parse::<i64>().ok()? * 10i64.pow(9 - frac.len() as u32);
    }
    let offset = match &s[i..] {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && matches!(tz.as_bytes()[0], b'+' | b'-') && tz.as_bytes()[3] == b':' => {
            let (h, m) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    let secs = u64::try_from(secs).ok()?;
    Some(SystemTime::UNIX_EPOCH + std::time::Duration::new(secs, nanos as u32))
}

/// The wall-clock time of monotonic instant `at` (now less its age).
pub fn wall(at: Instant) -> SystemTime {
    SystemTime::now() - Instant::now().saturating_duration_since(at)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rfc3339_is_utc_with_micros() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_795_000_000_123_456);
        assert_eq!(rfc3339(t), "2026-11-18T11:06:40.123456Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000000Z");
    }

    #[test]
    fn rfc3339_nano_as_go_writes_and_reads_it() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_795_000_000, 123_400_000);
        assert_eq!(rfc3339_nano(t), "2026-11-18T11:06:40.1234Z", "trailing zeros cut");
        let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        assert_eq!(rfc3339_nano(whole), "2026-11-18T11:06:40Z", "no fraction, no dot");
        let fine = SystemTime::UNIX_EPOCH + Duration::new(1_795_000_000, 1);
        assert_eq!(rfc3339_nano(fine), "2026-11-18T11:06:40.000000001Z");
        for t in [t, whole, fine] {
            assert_eq!(parse_rfc3339(&rfc3339_nano(t)), Some(t));
        }
        assert_eq!(parse_rfc3339("2026-11-18T12:06:40.1234+01:00"), Some(t), "an offset");
        assert_eq!(
            parse_rfc3339("2000-02-29T00:00:00Z"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400))
        );
        for bad in [
            "",
            "2026-11-18",
            "2026-13-01T00:00:00Z",
            "2026-11-18T11:06:40",
            "2026-11-18T11:06:40.Z",
            "x026-11-18T11:06:40Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
