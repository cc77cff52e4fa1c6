"""Decodes generated xDS resources with upstream's Python types and compares
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

from google.protobuf import descriptor_pool, json_format, message_factory

import envoy


def main():
    res_dir, golden_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    update = "--update" in sys.argv
    for mod in pkgutil.walk_packages(envoy.__path__, "envoy."):
        if mod.name.endswith("_pb2"):
            importlib.import_module(mod.name)
    pool = descriptor_pool.Default()
    by_kind = {}
    for entry in json.loads((res_dir / "manifest.json").read_text()):
        name = entry["type"].split("/", 1)[1]
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        msg = cls.FromString((res_dir / entry["file"]).read_bytes())
        by_kind.setdefault(entry["kind"], {})[entry["name"]] = json_format.MessageToDict(msg, descriptor_pool=pool)
    passed = failed = 0
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
