"""Parses a /metrics scrape with prometheus_client's text parser (what a
Prometheus-compatible scraper accepts) and checks families against istiod's
names, types and label names.

argv: the scrape's file, then names that must have a series in it (beyond
the ones every scrape with connected proxies has; `--only` first: none
but these). Exit 0 when all hold; otherwise every problem is
printed and the exit is 1.

The expectations are istiod's definitions, file by file:
  pkg/xds/monitoring.go                     pilot_total_xds_*, pilot_xds_*_reject,
                                            pilot_xds_expired_nonce, pilot_xds_write_timeout,
                                            pilot_xds_send_time
  pilot/pkg/xds/monitoring.go               pilot_services, pilot_xds, pilot_xds_pushes,
                                            pilot_debounce_time, pilot_pushcontext_init_seconds,
                                            pilot_xds_push_time, pilot_proxy_queue_time,
                                            pilot_push_triggers, pilot_proxy_convergence_time,
                                            pilot_inbound_updates, pilot_xds_config_size_bytes
  pilot/pkg/model/push_context.go           pilot_virt_services, pilot_destrule_subsets,
                                            pilot_eds_no_instances, pilot_no_ip,
                                            pilot_endpoint_not_ready, pilot_conflict_*
  pilot/pkg/config/kube/crdclient/metrics.go  pilot_k8s_cfg_events
  pilot/pkg/serviceregistry/kube/controller/controller.go  pilot_k8s_reg_events
  pkg/version/stats.go                      istio_build
  pilot/pkg/bootstrap/monitoring.go         istiod_uptime_seconds, pilot_info
  prometheus/client_golang process collector  process_*
"""

import sys

from prometheus_client.parser import text_string_to_metric_families

# name -> (type, label names of every sample, less `le` for histograms)
ISTIOD = {
    "pilot_xds": ("gauge", {"version"}),
    "pilot_xds_pushes": ("counter", {"type"}),
    "pilot_total_xds_rejects": ("counter", {"type"}),
    "pilot_xds_cds_reject": ("gauge", {"node", "err"}),
    "pilot_xds_eds_reject": ("gauge", {"node", "err"}),
    "pilot_xds_lds_reject": ("gauge", {"node", "err"}),
    "pilot_xds_rds_reject": ("gauge", {"node", "err"}),
    "pilot_xds_expired_nonce": ("counter", {"type"}),
    "pilot_xds_write_timeout": ("counter", set()),
    "pilot_total_xds_internal_errors": ("counter", set()),
    "pilot_services": ("gauge", set()),
    "pilot_virt_services": ("gauge", set()),
    "pilot_destrule_subsets": ("gauge", set()),
    "pilot_eds_no_instances": ("gauge", set()),
    "pilot_no_ip": ("gauge", set()),
    "pilot_endpoint_not_ready": ("gauge", set()),
    "pilot_conflict_inbound_listener": ("gauge", set()),
    "pilot_conflict_outbound_listener_tcp_over_current_tcp": ("gauge", set()),
    "pilot_k8s_cfg_events": ("counter", {"type", "event"}),
    "pilot_k8s_reg_events": ("counter", {"type", "event"}),
    "pilot_inbound_updates": ("counter", {"type"}),
    "pilot_xds_config_size_bytes": ("histogram", {"type"}),
    "pilot_xds_push_time": ("histogram", {"type"}),
    "pilot_xds_send_time": ("histogram", set()),
    "pilot_proxy_queue_time": ("histogram", set()),
    "pilot_proxy_convergence_time": ("histogram", set()),
    "pilot_debounce_time": ("histogram", set()),
    "pilot_pushcontext_init_seconds": ("histogram", set()),
    "pilot_push_triggers": ("counter", {"type"}),
    "pilot_info": ("gauge", {"version"}),
    "istio_build": ("gauge", {"component", "tag"}),
    "istiod_uptime_seconds": ("gauge", set()),
    "process_cpu_seconds_total": ("counter", set()),
    "process_resident_memory_bytes": ("gauge", set()),
    "process_virtual_memory_bytes": ("gauge", set()),
    "process_open_fds": ("gauge", set()),
    "process_max_fds": ("gauge", set()),
    "process_start_time_seconds": ("gauge", set()),
    # The rest of istiod's list (issue #39), each where istiod defines it:
    # pkg/xds/monitoring.go, pilot/pkg/model/typed_xds_cache.go,
    # pilot/pkg/model/gateway.go, pilot/pkg/model/jwks_resolver.go,
    # pilot/pkg/model/monitoring.go, pilot/pkg/model/push_context.go,
    # pilot/pkg/serviceregistry/kube/controller, pilot/pkg/xds/monitoring.go,
    # pkg/webhooks/monitoring.go, pkg/webhooks/validation/controller,
    # pilot/pkg/util/informermetric.
    "pilot_xds_recv_max": ("gauge", set()),
    "xds_cache_reads": ("counter", {"type"}),
    "xds_cache_evictions": ("counter", {"type"}),
    "xds_cache_size": ("gauge", set()),
    "xds_cache_dependent_config_size": ("gauge", set()),
    "pilot_total_rejected_configs": ("counter", {"type", "name"}),
    "pilot_jwks_resolver_network_fetch_success_total": ("counter", set()),
    "pilot_jwks_resolver_network_fetch_fail_total": ("counter", set()),
    "provider_lookup_cluster_failures": ("counter", {"type"}),
    "endpoint_no_pod": ("gauge", set()),
    "pilot_k8s_endpoints_pending_pod": ("gauge", set()),
    "pilot_k8s_endpoints_with_no_pods": ("counter", set()),
    "pilot_k8s_proxies_with_no_service_targets": ("counter", {"reason"}),
    "pilot_dns_cluster_without_endpoints": ("gauge", set()),
    "pilot_sds_certificate_errors_total": ("counter", set()),
    "webhook_patch_attempts_total": ("counter", {"name"}),
    "webhook_patch_retries_total": ("counter", {"name"}),
    "webhook_patch_failures_total": ("counter", {"name", "reason"}),
    "galley_validation_config_updates": ("counter", set()),
    "galley_validation_config_update_error": ("counter", {"reason"}),
    "controller_sync_errors_total": ("counter", {"cluster"}),
    "pilot_duplicate_envoy_clusters": ("gauge", set()),
    "pilot_vservice_dup_domain": ("gauge", set()),
}

# Present in every scrape of a serving istiod-rs with connected proxies.
ALWAYS = [
    "pilot_xds",
    "pilot_xds_pushes",
    "pilot_xds_write_timeout",
    "pilot_total_xds_internal_errors",
    "pilot_services",
    "pilot_virt_services",
    "pilot_destrule_subsets",
    "pilot_eds_no_instances",
    "pilot_no_ip",
    "pilot_endpoint_not_ready",
    "pilot_conflict_inbound_listener",
    "pilot_conflict_outbound_listener_tcp_over_current_tcp",
    "pilot_inbound_updates",
    "pilot_xds_config_size_bytes",
    "pilot_xds_push_time",
    "pilot_xds_send_time",
    "pilot_proxy_queue_time",
    "pilot_proxy_convergence_time",
    "pilot_debounce_time",
    "pilot_pushcontext_init_seconds",
    "pilot_push_triggers",
    "pilot_info",
    "istio_build",
    "istiod_uptime_seconds",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_open_fds",
    "process_start_time_seconds",
]

# The parser names a counter family without its `_total` suffix.
def family_name(name, typ):
    if typ == "counter" and name.endswith("_total"):
        return name[: -len("_total")]
    return name


def main():
    path, required = sys.argv[1], sys.argv[2:]
    # `--only`: just the names given (a scrape without connected proxies).
    always = ALWAYS
    if required[:1] == ["--only"]:
        always, required = [], required[1:]
    text = open(path).read()
    problems = []
    families = {}
    try:
        for f in text_string_to_metric_families(text):
            if f.name in families:
                problems.append(f"{f.name}: two families of one name (series not grouped)")
            families[f.name] = f
    except Exception as e:  # the scrape does not parse
        print(f"the exposition does not parse: {e!r}")
        sys.exit(1)
    for name in always + required:
        typ, labels = ISTIOD[name]
        f = families.get(family_name(name, typ))
        if f is None:
            problems.append(f"{name}: missing")
            continue
        if f.type != typ:
            problems.append(f"{name}: type {f.type}, istiod's is {typ}")
        if not f.samples:
            problems.append(f"{name}: no sample")
        for s in f.samples:
            got = set(s.labels) - {"le"}
            if got != labels:
                problems.append(f"{name}: sample {s.name}{s.labels} has labels {sorted(got)}, istiod's are {sorted(labels)}")
                break
        if typ == "histogram":
            # Per series: finite buckets cumulative and never above the
            # count, which the +Inf bucket equals.
            series = {}
            for s in f.samples:
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                series.setdefault(key, []).append(s)
            for key, samples in series.items():
                buckets = [s.value for s in samples if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"]
                count = [s.value for s in samples if s.name.endswith("_count")]
                inf = [s.value for s in samples if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"]
                if buckets != sorted(buckets) or not count or (buckets and buckets[-1] > count[0]) or inf != count:
                    problems.append(f"{name}{dict(key)}: buckets {buckets}, +Inf {inf}, count {count}")
    # Names istiod has that we serve must have istiod's shape, required or not.
    for name, (typ, labels) in ISTIOD.items():
        f = families.get(family_name(name, typ))
        if f is not None and f.type != typ:
            problems.append(f"{name}: type {f.type}, istiod's is {typ}")
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print(f"{len(families)} families parsed; {len(ALWAYS) + len(required)} checked against istiod")


if __name__ == "__main__":
    main()
