"""Round trip between istiod-rs's prost types and upstream's Python types.

For each case in DIR/cases.json ({"name", "type", "json"}):
  1. DIR/<name>.ours.bin, bytes our Rust types encoded, is decoded with the
     upstream message class from xds-protos, and must equal the expected
     value given as proto3 JSON (compared in canonical JSON form, which
     unpacks every Any, so field order inside Any bytes does not matter);
  2. the expected value is encoded by upstream's Python code into
     DIR/<name>.py.bin, for the Rust side to decode and compare.

Exit 0 when every case matches; 1 with a diff per mismatch otherwise.
"""

import importlib
import json
import pathlib
import pkgutil
import sys

from google.protobuf import descriptor_pool, json_format, message_factory

import envoy


def load_all_envoy_modules():
    # Any unpacking needs every type that may appear inside an Any.
    for mod in pkgutil.walk_packages(envoy.__path__, "envoy."):
        if mod.name.endswith("_pb2"):
            importlib.import_module(mod.name)


def canonical(msg):
    return json_format.MessageToDict(msg, descriptor_pool=descriptor_pool.Default())


def main():
    load_all_envoy_modules()
    case_dir = pathlib.Path(sys.argv[1])
    cases = json.loads((case_dir / "cases.json").read_text())
    pool = descriptor_pool.Default()
    failures = 0
    for case in cases:
        name = case["name"]
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(case["type"]))
        ours = cls.FromString((case_dir / f"{name}.ours.bin").read_bytes())
        expected = json_format.Parse(json.dumps(case["json"]), cls(), descriptor_pool=pool)
        got, want = canonical(ours), canonical(expected)
        if got != want:
            failures += 1
            print(f"MISMATCH {name} ({case['type']})")
            print("  decoded from our bytes: " + json.dumps(got, sort_keys=True))
            print("  expected:               " + json.dumps(want, sort_keys=True))
        else:
            print(f"ok {name}: {len(json.dumps(want))} bytes of JSON")
        (case_dir / f"{name}.py.bin").write_bytes(expected.SerializeToString())
    print(f"{len(cases) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
