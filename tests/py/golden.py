"""Decodes generated xDS resources with upstream's Python types, checks them
with Envoy's own field rules (the protoc-gen-validate annotations carried in
xds-protos' descriptors, every Any unpacked and checked too), and compares
them, as canonical JSON, with the golden files.

usage: golden.py RESOURCE_DIR GOLDEN_DIR [--update]

RESOURCE_DIR holds manifest.json ([{"kind", "name", "type", "file"}]) and
the encoded resources. Every resource must decode with xds-protos (Anys
unpacked), and each kind's JSON must equal GOLDEN_DIR/<kind>.json, unless
--update writes them. Prints "N passed, N failed".
"""

import importlib
import json
import pathlib
import pkgutil
import sys
import types
import warnings

from google.protobuf import descriptor_pool, json_format, message_factory

import envoy


def load_pgv():
    """protoc-gen-validate's interpreter, with its one protobuf 6+ fix:
    descriptors no longer have `label`; `is_repeated` says the same."""
    import protoc_gen_validate.validator as original

    src = open(original.__file__).read().replace("field.label == 3", "field.is_repeated")
    mod = types.ModuleType("pgv_patched")
    mod.__file__ = original.__file__
    exec(compile(src, original.__file__, "exec"), mod.__dict__)
    return mod


def envoy_errors(pgv, pool, msg, path):
    """Envoy's rules for `msg` and for every message inside its Anys."""
    errors = []
    try:
        pgv.validate_all(msg)
    except pgv.ValidationFailed as e:
        errors.append(f"{path}: {e}")

    def walk(m, p):
        for field, value in m.ListFields():
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                vf = field.message_type.fields_by_name["value"]
                items = list(value.items()) if vf.message_type is not None else []
            elif field.is_repeated:
                items = list(enumerate(value))
            else:
                items = [(None, value)]
            for key, sub in items:
                sp = f"{p}.{field.name}" + ("" if key is None else f"[{key}]")
                if sub.DESCRIPTOR.full_name == "google.protobuf.Any" and not sub.type_url:
                    continue  # an empty Any (a Wasm plugin without configuration) holds nothing
                if sub.DESCRIPTOR.full_name == "google.protobuf.Any":
                    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(sub.type_url.split("/", 1)[1]))
                    inner = cls()
                    sub.Unpack(inner)
                    errors.extend(envoy_errors(pgv, pool, inner, sp))
                else:
                    walk(sub, sp)

    walk(msg, path)
    return errors


def add_istio_proxy_types(pool):
    """istio-proxy's own filter configs, which xds-protos does not carry:
    transcribed here from istio/proxy (source/extensions/filters/http/
    istio_stats/config.proto: stats.PluginConfig and MetricConfig;
    source/extensions/filters/http/alpn/config.proto: the ALPN override),
    with their field numbers, so the golden files decode what Envoy would."""
    from google.protobuf import descriptor_pb2

    F = descriptor_pb2.FieldDescriptorProto

    def field(m, name, number, typ, label=F.LABEL_OPTIONAL, type_name=None):
        f = m.field.add(name=name, number=number, type=typ, label=label)
        if type_name:
            f.type_name = type_name

    stats = descriptor_pb2.FileDescriptorProto(name="istio_proxy/stats.proto", package="stats", syntax="proto3")
    stats.dependency.append("google/protobuf/duration.proto")
    mc = stats.message_type.add(name="MetricConfig")
    entry = mc.nested_type.add(name="DimensionsEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, F.TYPE_STRING)
    field(entry, "value", 2, F.TYPE_STRING)
    field(mc, "dimensions", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".stats.MetricConfig.DimensionsEntry")
    field(mc, "name", 2, F.TYPE_STRING)
    field(mc, "tags_to_remove", 3, F.TYPE_STRING, F.LABEL_REPEATED)
    field(mc, "match", 4, F.TYPE_STRING)
    field(mc, "drop", 5, F.TYPE_BOOL)
    reporter = stats.enum_type.add(name="Reporter")
    reporter.value.add(name="UNSPECIFIED", number=0)
    reporter.value.add(name="SERVER_GATEWAY", number=1)
    pc = stats.message_type.add(name="PluginConfig")
    field(pc, "disable_host_header_fallback", 6, F.TYPE_BOOL)
    field(pc, "tcp_reporting_duration", 7, F.TYPE_MESSAGE, type_name=".google.protobuf.Duration")
    field(pc, "metrics", 8, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".stats.MetricConfig")
    field(pc, "reporter", 10, F.TYPE_ENUM, type_name=".stats.Reporter")
    pool.Add(stats)

    alpn = descriptor_pb2.FileDescriptorProto(
        name="istio_proxy/alpn.proto", package="istio.envoy.config.filter.http.alpn.v2alpha1", syntax="proto3"
    )
    fc = alpn.message_type.add(name="FilterConfig")
    proto = fc.enum_type.add(name="Protocol")
    for i, n in enumerate(["HTTP10", "HTTP11", "HTTP2"]):
        proto.value.add(name=n, number=i)
    ao = fc.nested_type.add(name="AlpnOverride")
    field(ao, "upstream_protocol", 1, F.TYPE_ENUM, type_name=".istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig.Protocol")
    field(ao, "alpn_override", 2, F.TYPE_STRING, F.LABEL_REPEATED)
    field(fc, "alpn_override", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig.AlpnOverride")
    pool.Add(alpn)


def main():
    res_dir, golden_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    update = "--update" in sys.argv
    for mod in pkgutil.walk_packages(envoy.__path__, "envoy."):
        if mod.name.endswith("_pb2"):
            importlib.import_module(mod.name)
    importlib.import_module("udpa.type.v1.typed_struct_pb2")
    pool = descriptor_pool.Default()
    add_istio_proxy_types(pool)
    warnings.simplefilter("ignore", FutureWarning)  # pgv's jinja templates touch GetOptions()
    pgv = load_pgv()
    # The checker must be able to fail: Envoy rejects an HCM with no
    # stat_prefix and no route source (grpcio would accept it).
    from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm

    assert envoy_errors(pgv, pool, hcm.HttpConnectionManager(), "self-check"), "protoc-gen-validate checks nothing"
    invalid = []
    by_kind = {}
    for entry in json.loads((res_dir / "manifest.json").read_text()):
        name = entry["type"].split("/", 1)[1]
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        msg = cls.FromString((res_dir / entry["file"]).read_bytes())
        invalid.extend(envoy_errors(pgv, pool, msg, f"{entry['kind']} {entry['name']}"))
        by_kind.setdefault(entry["kind"], {})[entry["name"]] = json_format.MessageToDict(msg, descriptor_pool=pool)
    passed = failed = 0
    if invalid:
        failed += 1
        print("FAIL Envoy would reject:")
        for e in invalid:
            print(f"  {e}")
    else:
        passed += 1
        print("ok every resource passes Envoy's field rules")
    golden_dir.mkdir(parents=True, exist_ok=True)
    for kind, resources in sorted(by_kind.items()):
        text = json.dumps(resources, indent=2, sort_keys=True) + "\n"
        path = golden_dir / f"{kind}.json"
        if update:
            path.write_text(text)
            print(f"wrote {path} ({len(resources)} resources)")
            passed += 1
        elif path.exists() and path.read_text() == text:
            print(f"ok {kind}: {len(resources)} resources")
            passed += 1
        else:
            failed += 1
            print(f"FAIL {kind}: differs from {path} (run with UPDATE_GOLDEN=1 and review the diff)")
            if path.exists():
                want = json.loads(path.read_text())
                for n in sorted(set(want) | set(resources)):
                    if want.get(n) != resources.get(n):
                        print(f"  {n}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
