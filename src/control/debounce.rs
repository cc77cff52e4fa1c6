//! When to publish (istiod's `PILOT_DEBOUNCE_AFTER`, `PILOT_DEBOUNCE_MAX`,
//! `PILOT_ENABLE_EDS_DEBOUNCE`), as a pure state machine driven by the
//! caller's clock. Unlike istiod, the first change after a quiet period is
//! published at once (a lone endpoint change does not wait 100ms), and the
//! changes that follow it are throttled, not debounced: what has
//! accumulated is published `after` past the first change not yet
//! published, however many follow. istiod waits for `after` without a
//! change, so a change every 100ms starves every push until `max` (10s);
//! here `max` stays an upper bound that only an `after` above it reaches.

use std::time::{Duration, Instant};

/// What to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Publish now.
    Publish,
    /// Check again at this instant.
    WaitUntil(Instant),
    /// Nothing pending.
    Idle,
}

/// The debouncer.
#[derive(Debug, Clone)]
pub struct Debouncer {
    after: Duration,
    max: Duration,
    eds_debounce: bool,
    /// Last change seen, published or not.
    last_change: Option<Instant>,
    /// First change not yet published.
    first_pending: Option<Instant>,
}

impl Debouncer {
    /// A debouncer with istiod's knobs.
    pub fn new(after: Duration, max: Duration, eds_debounce: bool) -> Self {
        Self { after, max, eds_debounce, last_change: None, first_pending: None }
    }

    /// A change arrived at `now`.
    pub fn on_change(&mut self, now: Instant, endpoints_only: bool) -> Decision {
        let quiet = self.last_change.is_none_or(|t| now.saturating_duration_since(t) >= self.after);
        self.last_change = Some(now);
        if (endpoints_only && !self.eds_debounce) || (self.first_pending.is_none() && quiet) {
            return Decision::Publish;
        }
        self.first_pending.get_or_insert(now);
        self.poll(now)
    }

    /// Whether a pending publish is due at `now`.
    pub fn poll(&self, now: Instant) -> Decision {
        let (Some(first), Some(last)) = (self.first_pending, self.last_change) else { return Decision::Idle };
        // A throttle: changes keep arriving (`last` moves) without moving
        // the deadline of the oldest unpublished one.
        debug_assert!(last >= first);
        let due = first + self.after.min(self.max);
        if now >= due { Decision::Publish } else { Decision::WaitUntil(due) }
    }

    /// The caller published everything pending.
    pub fn published(&mut self) {
        self.first_pending = None;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const AFTER: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(10);

    #[test]
    fn lone_change_publishes_at_once() {
        let t = Instant::now();
        let mut d = Debouncer::new(AFTER, MAX, true);
        assert_eq!(d.on_change(t, true), Decision::Publish);
        d.published();
        // A second lone change after a quiet period: at once again.
        assert_eq!(d.on_change(t + AFTER, true), Decision::Publish);
    }

    #[test]
    fn burst_is_coalesced() {
        let t = Instant::now();
        let mut d = Debouncer::new(AFTER, MAX, true);
        assert_eq!(d.on_change(t, false), Decision::Publish);
        d.published();
        let ms = Duration::from_millis;
        assert_eq!(d.on_change(t + ms(10), false), Decision::WaitUntil(t + ms(110)));
        // A later change does not push the deadline back (a throttle).
        assert_eq!(d.on_change(t + ms(50), false), Decision::WaitUntil(t + ms(110)));
        assert_eq!(d.poll(t + ms(109)), Decision::WaitUntil(t + ms(110)));
        assert_eq!(d.poll(t + ms(110)), Decision::Publish);
    }

    /// Issue #18: a change every 100ms (eds-churn at 10/s) left istiod's
    /// debouncer no quiet window, so every push waited for `max` (10s).
    #[test]
    fn sustained_churn_is_published_every_after() {
        let gaps = vec![100u64; 100];
        let (changes, publishes) = simulate(&gaps, AFTER, MAX);
        for c in &changes {
            let p = publishes.iter().find(|p| *p >= c).expect("published");
            assert!(*p - *c <= AFTER, "change at {c:?} published at {p:?}");
        }
        assert!(publishes.len() >= changes.len() / 2, "{} publishes for {} changes", publishes.len(), changes.len());
    }

    #[test]
    fn eds_bypasses_debounce_when_disabled() {
        let t = Instant::now();
        let mut d = Debouncer::new(AFTER, MAX, false);
        d.on_change(t, false);
        d.published();
        assert_eq!(d.on_change(t + Duration::from_millis(1), true), Decision::Publish);
        assert!(matches!(d.on_change(t + Duration::from_millis(2), false), Decision::WaitUntil(_)));
    }

    /// Runs a schedule of change times (ms offsets, sorted) through the
    /// debouncer, publishing as told; returns the publish times.
    fn simulate(gaps: &[u64], after: Duration, max: Duration) -> (Vec<Duration>, Vec<Duration>) {
        let t0 = Instant::now();
        let mut d = Debouncer::new(after, max, true);
        let mut changes = Vec::new();
        let mut publishes = Vec::new();
        let mut at = Duration::ZERO;
        let mut wait: Option<Instant> = None;
        for g in gaps {
            let next = at + Duration::from_millis(*g);
            // Fire any timer due before the next change.
            while let Some(w) = wait {
                if w > t0 + next {
                    break;
                }
                match d.poll(w) {
                    Decision::Publish => {
                        publishes.push(w - t0);
                        d.published();
                        wait = None;
                    }
                    Decision::WaitUntil(x) => wait = Some(x),
                    Decision::Idle => wait = None,
                }
            }
            at = next;
            changes.push(at);
            match d.on_change(t0 + at, false) {
                Decision::Publish => {
                    publishes.push(at);
                    d.published();
                    wait = None;
                }
                Decision::WaitUntil(x) => wait = Some(x),
                Decision::Idle => {}
            }
        }
        while let Some(w) = wait {
            match d.poll(w) {
                Decision::Publish => {
                    publishes.push(w - t0);
                    d.published();
                    wait = None;
                }
                Decision::WaitUntil(x) => wait = Some(x),
                Decision::Idle => wait = None,
            }
        }
        (changes, publishes)
    }

    proptest! {
        #[test]
        fn every_change_is_published_in_bounded_time(gaps in proptest::collection::vec(0u64..300, 1..200),
                                                     after_ms in 1u64..200, max_ms in 1u64..2000) {
            let (after, max) = (Duration::from_millis(after_ms), Duration::from_millis(max_ms));
            let (changes, publishes) = simulate(&gaps, after, max);
            prop_assert!(!publishes.is_empty());
            prop_assert!(publishes.len() <= changes.len(), "never more publishes than changes");
            // Every change is covered by a publish within `after` (and
            // `max`) of its own arrival, whatever follows it.
            for c in &changes {
                let p = publishes.iter().find(|p| *p >= c);
                prop_assert!(p.is_some(), "change at {c:?} never published");
                prop_assert!(*p.unwrap() <= *c + after.min(max), "change at {c:?} waited until {:?}", p.unwrap());
            }
            // Bursts are coalesced: two publishes closer than `after.min(max)`
            // only where the second is a leading edge (a change at its own
            // instant after a quiet period).
            for w in publishes.windows(2) {
                let gap = w[1] - w[0];
                prop_assert!(gap >= after.min(max) || changes.contains(&w[1]),
                    "publishes at {:?} and {:?}", w[0], w[1]);
            }
            // The last publish is not before the last change.
            prop_assert!(publishes.last() >= changes.last());
            // Publishes are ordered.
            prop_assert!(publishes.windows(2).all(|w| w[0] <= w[1]));
        }

        #[test]
        fn a_change_after_a_quiet_period_is_published_at_once(gaps in proptest::collection::vec(0u64..50, 0..50),
                                                              quiet in 100u64..1000) {
            let after = Duration::from_millis(100);
            let mut schedule = gaps.clone();
            schedule.push(quiet);
            let (changes, publishes) = simulate(&schedule, after, Duration::from_secs(10));
            let last = *changes.last().unwrap();
            // The quiet period flushed the burst before `last`, and `last`
            // itself went out at its own instant.
            prop_assert!(publishes.contains(&last));
        }

        #[test]
        fn a_steady_stream_publishes_every_after(n in 50usize..300, gap in 1u64..100) {
            // A change every `gap` ms never leaves a 100ms quiet period;
            // the throttle still publishes at least every 100ms + gap.
            let gaps = vec![gap; n];
            let after = Duration::from_millis(100);
            let (_, publishes) = simulate(&gaps, after, MAX);
            for w in publishes.windows(2) {
                prop_assert!(w[1] - w[0] <= after + Duration::from_millis(gap));
            }
        }
    }
}
