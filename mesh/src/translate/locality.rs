//! Locality-aware load balancing, per proxy locality, as istiod applies
//! a DestinationRule's `localityLbSetting` to the endpoints it sends:
//!
//! - `distribute`: the first rule whose `from` matches the proxy's locality
//!   sets each endpoint locality's weight to its share of the matching `to`
//!   entry (split by the localities' own weights when a pattern matches
//!   several); localities no entry matches lose their endpoints. The
//!   cluster gets `locality_weighted_lb_config` (`traffic_policy.rs`).
//! - failover (only with outlier detection, which is what makes Envoy
//!   leave a priority): priority 0 for the proxy's own region/zone/subzone,
//!   1 for its zone, 2 for its region, 3 for other regions, and 4 for
//!   regions a `failover` rule from the proxy's region does not name;
//!   the priorities are then renumbered to leave no gaps.
//!
//! Not yet: `failoverPriority` (label-ordered priorities).

use std::collections::BTreeMap;

use istiod_config::istio::networking::{LocalityDistribute, LocalityLoadBalancerSetting};
use istiod_proto::envoy::config::core::v3::Locality;
use istiod_proto::envoy::config::endpoint::v3::ClusterLoadAssignment;

/// Whether `l` matches `pattern` (`region/zone/subzone`, `*` for any part;
/// missing trailing parts match anything).
pub fn matches(l: &Locality, pattern: &str) -> bool {
    let parts = [l.region.as_str(), l.zone.as_str(), l.sub_zone.as_str()];
    pattern.split('/').zip(parts).all(|(want, have)| want == "*" || want == have)
}

/// istiod's `LbPriority`: how far an endpoint locality is from the proxy's.
fn proximity(proxy: &Locality, ep: &Locality) -> u32 {
    if proxy.region != ep.region {
        3
    } else if proxy.zone != ep.zone {
        2
    } else if proxy.sub_zone != ep.sub_zone {
        1
    } else {
        0
    }
}

/// Parses a class's locality (`region/zone/subzone`).
pub fn parse(s: &str) -> Locality {
    let mut p = s.splitn(3, '/');
    Locality {
        region: p.next().unwrap_or_default().to_owned(),
        zone: p.next().unwrap_or_default().to_owned(),
        sub_zone: p.next().unwrap_or_default().to_owned(),
    }
}

/// Applies `setting` for a proxy at `proxy` to `cla`; `outlier_detection`
/// says whether failover may apply. Returns whether anything changed.
pub fn apply(
    cla: &mut ClusterLoadAssignment,
    proxy: &Locality,
    setting: Option<&LocalityLoadBalancerSetting>,
    outlier_detection: bool,
) -> bool {
    if let Some(s) = setting.filter(|s| !s.distribute.is_empty()) {
        return distribute(cla, proxy, &s.distribute);
    }
    if !outlier_detection || setting.and_then(|s| s.enabled) == Some(false) {
        return false;
    }
    let failover = setting.map(|s| s.failover.as_slice()).unwrap_or_default();
    let mut by_priority: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, group) in cla.endpoints.iter_mut().enumerate() {
        let ep = group.locality.clone().unwrap_or_default();
        let mut p = proximity(proxy, &ep);
        if p == 3
            && let Some(rule) = failover.iter().find(|f| f.from == proxy.region)
            && ep.region != rule.to
        {
            p = 4;
        }
        by_priority.entry(p).or_default().push(i);
    }
    for (rank, groups) in by_priority.values().enumerate() {
        for &i in groups {
            cla.endpoints[i].priority = rank as u32;
        }
    }
    true
}

fn distribute(cla: &mut ClusterLoadAssignment, proxy: &Locality, rules: &[LocalityDistribute]) -> bool {
    let Some(rule) = rules.iter().find(|r| matches(proxy, &r.from)) else { return false };
    let mut unmatched: Vec<bool> = vec![true; cla.endpoints.len()];
    for (pattern, &weight) in &rule.to {
        let mut chosen: Vec<(usize, u32)> = Vec::new();
        for (i, group) in cla.endpoints.iter().enumerate() {
            if unmatched[i] && matches(&group.locality.clone().unwrap_or_default(), pattern) {
                unmatched[i] = false;
                chosen.push((i, group.load_balancing_weight.unwrap_or(1)));
            }
        }
        let total: u32 = chosen.iter().map(|(_, w)| w).sum();
        for (i, own) in chosen {
            let share = (f64::from(own) * f64::from(weight) / f64::from(total.max(1))).ceil() as u32;
            if share > 0 {
                cla.endpoints[i].load_balancing_weight = Some(share);
            }
        }
    }
    for (i, gone) in unmatched.into_iter().enumerate() {
        if gone {
            cla.endpoints[i].lb_endpoints.clear();
        }
    }
    true
}

/// The endpoints of a cluster `form` for a proxy at `proxy_locality`, when
/// its DestinationRule asks for locality load balancing; `None` when the
/// shared endpoints stand as they are.
pub fn endpoints_for(form: &crate::translate::cluster::ClusterForm, proxy_locality: &str) -> Option<bytes::Bytes> {
    use istiod_proto::prost::Message;
    let shared = form.endpoints_typed.as_ref()?;
    // Without weights to apply, only failover (outlier detection) changes
    // anything: no copy otherwise.
    if !form.outlier_detection && form.locality.as_ref().is_none_or(|l| l.distribute.is_empty()) {
        return None;
    }
    let mut cla = (**shared).clone();
    localize(&mut cla, form, proxy_locality).then(|| bytes::Bytes::from(cla.encode_to_vec()))
}

/// Applies `form`'s locality load balancing to `cla` for a proxy at
/// `proxy_locality`; whether anything changed.
pub fn localize(
    cla: &mut ClusterLoadAssignment,
    form: &crate::translate::cluster::ClusterForm,
    proxy_locality: &str,
) -> bool {
    if !form.outlier_detection && form.locality.as_ref().is_none_or(|l| l.distribute.is_empty()) {
        return false;
    }
    apply(cla, &parse(proxy_locality), form.locality.as_ref(), form.outlier_detection)
}

#[cfg(test)]
mod tests {
    use istiod_config::istio::networking::LocalityFailover;
    use istiod_proto::envoy::config::endpoint::v3::LocalityLbEndpoints;

    use super::*;

    fn cla(localities: &[&str]) -> ClusterLoadAssignment {
        ClusterLoadAssignment {
            cluster_name: "c".into(),
            endpoints: localities
                .iter()
                .map(|l| LocalityLbEndpoints {
                    locality: Some(parse(l)),
                    lb_endpoints: vec![Default::default()],
                    load_balancing_weight: Some(1),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn priorities(c: &ClusterLoadAssignment) -> Vec<u32> {
        c.endpoints.iter().map(|e| e.priority).collect()
    }

    #[test]
    fn failover_orders_by_proximity_without_gaps() {
        let proxy = parse("us-east/a/1");
        let mut c = cla(&["us-east/a/1", "us-east/a/2", "us-east/b/1", "eu-west/a/1"]);
        assert!(apply(&mut c, &proxy, None, true));
        assert_eq!(priorities(&c), [0, 1, 2, 3]);
        let mut c = cla(&["us-east/b/1", "eu-west/a/1"]);
        apply(&mut c, &proxy, None, true);
        assert_eq!(priorities(&c), [0, 1], "renumbered: no empty priorities");
    }

    #[test]
    fn failover_needs_outlier_detection_and_can_be_disabled() {
        let proxy = parse("us-east/a/1");
        let mut c = cla(&["us-east/a/1", "eu-west/a/1"]);
        assert!(!apply(&mut c, &proxy, None, false));
        assert_eq!(priorities(&c), [0, 0]);
        let off = LocalityLoadBalancerSetting { enabled: Some(false), ..Default::default() };
        assert!(!apply(&mut c, &proxy, Some(&off), true));
    }

    #[test]
    fn failover_rules_put_the_named_region_before_the_others() {
        let proxy = parse("us-east/a/1");
        let s = LocalityLoadBalancerSetting {
            failover: vec![LocalityFailover { from: "us-east".into(), to: "us-west".into() }],
            ..Default::default()
        };
        let mut c = cla(&["eu-west/a/1", "us-west/a/1", "us-east/a/1"]);
        apply(&mut c, &proxy, Some(&s), true);
        assert_eq!(priorities(&c), [2, 1, 0]);
    }

    #[test]
    fn distribute_sets_weights_and_drops_unlisted_localities() {
        let proxy = parse("us-east/a/1");
        let s = LocalityLoadBalancerSetting {
            distribute: vec![
                LocalityDistribute { from: "eu-west/*".into(), to: [("eu-west/*".to_owned(), 100)].into() },
                LocalityDistribute {
                    from: "us-east/a/*".into(),
                    to: [("us-east/a/*".to_owned(), 80), ("us-west/*".to_owned(), 20)].into(),
                },
            ],
            ..Default::default()
        };
        let mut c = cla(&["us-east/a/1", "us-east/a/2", "us-west/x/1", "eu-west/a/1"]);
        assert!(apply(&mut c, &proxy, Some(&s), false), "distribute does not need outlier detection");
        let weights: Vec<Option<u32>> = c.endpoints.iter().map(|e| e.load_balancing_weight).collect();
        assert_eq!(weights[..3], [Some(40), Some(40), Some(20)]);
        assert!(c.endpoints[3].lb_endpoints.is_empty(), "eu-west is not listed for this proxy");
        assert!(c.endpoints[..3].iter().all(|e| !e.lb_endpoints.is_empty()));
    }

    #[test]
    fn locality_patterns() {
        let l = parse("us-east/a/1");
        assert!(matches(&l, "*"));
        assert!(matches(&l, "us-east/*"));
        assert!(matches(&l, "us-east/a/*"));
        assert!(matches(&l, "us-east/a/1"));
        assert!(matches(&l, "us-east"));
        assert!(!matches(&l, "us-east/b/*"));
        assert!(!matches(&l, "eu-west/*"));
    }
}
