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
                if sub.DESCRIPTOR.full_name == "google.protobuf.Any":
                    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(sub.type_url.split("/", 1)[1]))
                    inner = cls()
                    sub.Unpack(inner)
                    errors.extend(envoy_errors(pgv, pool, inner, sp))
                else:
                    walk(sub, sp)

    walk(msg, path)
    return errors


def main():
    res_dir, golden_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    update = "--update" in sys.argv
    for mod in pkgutil.walk_packages(envoy.__path__, "envoy."):
        if mod.name.endswith("_pb2"):
            importlib.import_module(mod.name)
    pool = descriptor_pool.Default()
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
