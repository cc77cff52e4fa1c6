"""Checks istiod-rs's own .proto schemas against upstream descriptors.

Input: a serialized FileDescriptorSet of everything under proto/protos (what
protox compiled for the Rust build), plus optional type URLs that the Rust
crate declares.

Upstream, for Envoy, xDS, udpa and google.rpc, is the descriptor pool of the
PyPI `xds-protos` package: each of our files must have the same path as the
upstream file (so `envoy/config/cluster/v3/cluster.proto` is compared with
module `envoy.config.cluster.v3.cluster_pb2`), the same package, and every
message, nested message, enum, enum value, field, oneof and service method we
declare must exist upstream with the same number, type, label and type name.
Istio's own packages (istio.*) are not in xds-protos; they are compared with
the transcribed facts in istio_facts.py.

Exit status 0 when everything matches; 1 with one line per mismatch otherwise.
"""

import argparse
import importlib
import sys

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FieldDescriptor

import istio_facts

FDP = descriptor_pb2.FieldDescriptorProto
TYPE_NAMES = {v: k for k, v in FDP.Type.items()}
LABEL_NAMES = {v: k for k, v in FDP.Label.items()}
# Files protox supplies itself; they are not ours to check.
BUILTIN_PREFIXES = ("google/protobuf/",)


class Checker:
    def __init__(self):
        self.errors = []
        self.counts = {"files": 0, "messages": 0, "fields": 0, "enums": 0, "methods": 0}

    def err(self, where, msg):
        self.errors.append(f"{where}: {msg}")

    # ---- upstream = xds-protos ------------------------------------------------

    def check_upstream_file(self, f):
        module = f.name[: -len(".proto")].replace("/", ".") + "_pb2"
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            self.err(f.name, f"no upstream file at this path in xds-protos ({e})")
            return
        up_file = mod.DESCRIPTOR
        if up_file.package != f.package:
            self.err(f.name, f"package {f.package!r}, upstream {up_file.package!r}")
        for m in f.message_type:
            self.check_message(m, f"{f.package}.{m.name}")
        for e in f.enum_type:
            self.check_enum(e, f"{f.package}.{e.name}")
        for s in f.service:
            self.check_service(s, f"{f.package}.{s.name}")

    def pool(self):
        return descriptor_pool.Default()

    def check_message(self, m, full):
        self.counts["messages"] += 1
        try:
            up = self.pool().FindMessageTypeByName(full)
        except KeyError:
            self.err(full, "message does not exist upstream")
            return
        if bool(m.options.map_entry) != bool(up.GetOptions().map_entry):
            self.err(full, "map entry flag differs from upstream")
        oneofs = [o.name for o in m.oneof_decl]
        for fd in m.field:
            self.counts["fields"] += 1
            where = f"{full}.{fd.name}"
            upf = up.fields_by_name.get(fd.name)
            if upf is None:
                self.err(where, "field does not exist upstream")
                continue
            if fd.number != upf.number:
                self.err(where, f"number {fd.number}, upstream {upf.number}")
            if fd.type != upf.type:
                self.err(where, f"type {TYPE_NAMES[fd.type]}, upstream {TYPE_NAMES[upf.type]}")
            repeated = fd.label == FDP.LABEL_REPEATED
            if repeated != upf.is_repeated:
                self.err(where, f"label {LABEL_NAMES[fd.label]}, upstream repeated={upf.is_repeated}")
            up_tn = None
            if upf.message_type is not None:
                up_tn = upf.message_type.full_name
            elif upf.enum_type is not None:
                up_tn = upf.enum_type.full_name
            ours_tn = fd.type_name.lstrip(".") or None
            if ours_tn != up_tn:
                self.err(where, f"type name {ours_tn}, upstream {up_tn}")
            ours_oneof = None
            if fd.HasField("oneof_index") and not fd.proto3_optional:
                ours_oneof = oneofs[fd.oneof_index]
            up_oneof = upf.containing_oneof
            up_oneof_name = None
            if up_oneof is not None and not (
                len(up_oneof.fields) == 1 and up_oneof.name == "_" + upf.name
            ):
                up_oneof_name = up_oneof.name
            if ours_oneof != up_oneof_name:
                self.err(where, f"oneof {ours_oneof}, upstream {up_oneof_name}")
            up_optional = up_oneof is not None and up_oneof_name is None
            if bool(fd.proto3_optional) != up_optional:
                self.err(where, f"proto3 optional {fd.proto3_optional}, upstream {up_optional}")
        for nested in m.nested_type:
            self.check_message(nested, f"{full}.{nested.name}")
        for e in m.enum_type:
            self.check_enum(e, f"{full}.{e.name}")

    def check_enum(self, e, full):
        self.counts["enums"] += 1
        try:
            up = self.pool().FindEnumTypeByName(full)
        except KeyError:
            self.err(full, "enum does not exist upstream")
            return
        for v in e.value:
            upv = up.values_by_name.get(v.name)
            if upv is None:
                self.err(f"{full}.{v.name}", "enum value does not exist upstream")
            elif upv.number != v.number:
                self.err(f"{full}.{v.name}", f"number {v.number}, upstream {upv.number}")

    def check_service(self, s, full):
        try:
            up = self.pool().FindServiceByName(full)
        except KeyError:
            self.err(full, "service does not exist upstream")
            return
        for meth in s.method:
            self.counts["methods"] += 1
            where = f"{full}/{meth.name}"
            upm = up.methods_by_name.get(meth.name)
            if upm is None:
                self.err(where, "method does not exist upstream")
                continue
            ours = (
                meth.input_type.lstrip("."),
                meth.output_type.lstrip("."),
                meth.client_streaming,
                meth.server_streaming,
            )
            theirs = (
                upm.input_type.full_name,
                upm.output_type.full_name,
                upm.client_streaming,
                upm.server_streaming,
            )
            if ours != theirs:
                self.err(where, f"signature {ours}, upstream {theirs}")

    # ---- upstream = transcribed Istio facts -----------------------------------

    def check_istio_file(self, f):
        seen_msgs = set()
        seen_enums = set()

        def walk_msg(m, full):
            self.counts["messages"] += 1
            seen_msgs.add(full)
            facts = istio_facts.FACTS.get(full)
            if facts is None:
                self.err(full, "message not in istio_facts")
                return
            oneofs = [o.name for o in m.oneof_decl]
            names = set()
            for fd in m.field:
                self.counts["fields"] += 1
                names.add(fd.name)
                where = f"{full}.{fd.name}"
                want = facts.get(fd.name)
                if want is None:
                    self.err(where, "field not in istio_facts")
                    continue
                oneof = None
                if fd.HasField("oneof_index") and not fd.proto3_optional:
                    oneof = oneofs[fd.oneof_index]
                got = (
                    fd.number,
                    TYPE_NAMES[fd.type],
                    LABEL_NAMES[fd.label],
                    fd.type_name.lstrip(".") or None,
                    oneof,
                )
                if got != tuple(want):
                    self.err(where, f"{got}, upstream {tuple(want)}")
                want_optional = where in istio_facts.PROTO3_OPTIONAL
                if bool(fd.proto3_optional) != want_optional:
                    self.err(where, f"proto3 optional {fd.proto3_optional}, upstream {want_optional}")
            for missing in sorted(set(facts) - names):
                self.err(f"{full}.{missing}", "upstream field missing from our schema")
            for nested in m.nested_type:
                walk_msg(nested, f"{full}.{nested.name}")
            for e in m.enum_type:
                walk_enum(e, f"{full}.{e.name}")

        def walk_enum(e, full):
            self.counts["enums"] += 1
            seen_enums.add(full)
            want = istio_facts.ENUM_FACTS.get(full)
            if want is None:
                self.err(full, "enum not in istio_facts")
                return
            got = {v.name: v.number for v in e.value}
            if got != want:
                self.err(full, f"values {got}, upstream {want}")

        for m in f.message_type:
            walk_msg(m, f"{f.package}.{m.name}")
        for e in f.enum_type:
            walk_enum(e, f"{f.package}.{e.name}")
        for s in f.service:
            full = f"{f.package}.{s.name}"
            want = istio_facts.SERVICE_FACTS.get(full)
            if want is None:
                self.err(full, "service not in istio_facts")
                continue
            got = {
                m.name: (
                    m.input_type.lstrip("."),
                    m.output_type.lstrip("."),
                    m.client_streaming,
                    m.server_streaming,
                )
                for m in s.method
            }
            self.counts["methods"] += len(got)
            if got != {k: tuple(v) for k, v in want.items()}:
                self.err(full, f"methods {got}, upstream {want}")
        return seen_msgs, seen_enums

    # ---- driver ----------------------------------------------------------------

    def run(self, fds, type_urls):
        istio_msgs, istio_enums = set(), set()
        declared = set()
        for f in fds.file:
            if f.name.startswith(BUILTIN_PREFIXES):
                continue
            self.counts["files"] += 1
            if f.syntax != "proto3":
                self.err(f.name, f"syntax {f.syntax!r}, expected proto3")

            def collect(prefix, msgs):
                for m in msgs:
                    declared.add(f"{prefix}.{m.name}")
                    collect(f"{prefix}.{m.name}", m.nested_type)

            collect(f.package, f.message_type)
            if f.package.startswith("istio."):
                msgs, enums = self.check_istio_file(f)
                istio_msgs |= msgs
                istio_enums |= enums
            else:
                self.check_upstream_file(f)
        # Every transcribed Istio message must be declared (nothing dropped).
        for full in sorted(set(istio_facts.FACTS) - istio_msgs):
            self.err(full, "in istio_facts but missing from our schema")
        for full in sorted(set(istio_facts.ENUM_FACTS) - istio_enums):
            self.err(full, "enum in istio_facts but missing from our schema")
        services = {f"{f.package}.{s.name}" for f in fds.file for s in f.service}
        for full in sorted(set(istio_facts.SERVICE_FACTS) - services):
            self.err(full, "service in istio_facts but missing from our schema")
        for url in type_urls:
            prefix = "type.googleapis.com/"
            if not url.startswith(prefix):
                self.err(url, f"type URL does not start with {prefix}")
                continue
            name = url[len(prefix):]
            if name not in declared:
                self.err(url, "type URL names a message our schema does not declare")
            if not name.startswith("istio."):
                try:
                    self.pool().FindMessageTypeByName(name)
                except KeyError:
                    self.err(url, "type URL names no upstream message")
            elif name not in istio_facts.FACTS:
                self.err(url, "type URL names no known Istio message")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("descriptor_set", help="serialized FileDescriptorSet")
    ap.add_argument("--type-url", action="append", default=[], help="type URL to check")
    args = ap.parse_args()
    with open(args.descriptor_set, "rb") as fh:
        fds = descriptor_pb2.FileDescriptorSet.FromString(fh.read())
    c = Checker()
    c.run(fds, args.type_url)
    for e in c.errors:
        print(f"MISMATCH {e}")
    summary = ", ".join(f"{v} {k}" for k, v in c.counts.items())
    print(f"checked {summary}, {len(args.type_url)} type URLs: {len(c.errors)} mismatches")
    sys.exit(1 if c.errors else 0)


if __name__ == "__main__":
    main()
