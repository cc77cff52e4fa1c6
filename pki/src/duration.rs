//! Durations as Go's `time.Duration.String()` writes them (`24h0m0s`,
//! `1m30s`, `45s`): istiod's error messages quote them.

use std::time::Duration;

/// `d` in Go's notation, to whole seconds.
pub(crate) fn go(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, sec) = (s / 3600, (s / 60) % 60, s % 60);
    match (h, m) {
        (0, 0) => format!("{sec}s"),
        (0, _) => format!("{m}m{sec}s"),
        _ => format!("{h}h{m}m{sec}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_go_writes_them() {
        assert_eq!(go(Duration::from_secs(86_400)), "24h0m0s");
        assert_eq!(go(Duration::from_secs(90)), "1m30s");
        assert_eq!(go(Duration::from_secs(45)), "45s");
        assert_eq!(go(Duration::from_secs(3601)), "1h0m1s");
    }
}
