"""Reads a CPU profile as pprof does: gunzips it and decodes it as a
perftools.profiles.Profile with protobuf's own decoder. The schema is
github.com/google/pprof's proto/profile.proto, field for field, built here as
a descriptor (no protoc on the test machines).

argv: the profile's file, then function name fragments at least one sampled
function must contain. Prints a summary; exit 0 when the profile is a CPU
profile with samples whose functions are named, else 1 with the problems.

With `--heap` first: the profile is a heap profile (`inuse_space` in bytes,
period `space`/bytes) whose samples are raw addresses in the mappings it
lists, for pprof to symbolize with the binary: at least one sample, every
location inside a mapping, and some mapping the named file (the next
argument, e.g. pilot-discovery).
"""

import gzip
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def message(fdp, name, fields):
    m = fdp.message_type.add()
    m.name = name
    for number, fname, ftype, label, type_name in fields:
        f = m.field.add()
        f.name, f.number, f.type, f.label = fname, number, ftype, label
        if type_name:
            f.type_name = ".perftools.profiles." + type_name


OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED
I64, U64, STR, BOOL, MSG = F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_STRING, F.TYPE_BOOL, F.TYPE_MESSAGE

fdp = descriptor_pb2.FileDescriptorProto(name="profile.proto", package="perftools.profiles", syntax="proto3")
message(fdp, "Profile", [
    (1, "sample_type", MSG, REP, "ValueType"),
    (2, "sample", MSG, REP, "Sample"),
    (3, "mapping", MSG, REP, "Mapping"),
    (4, "location", MSG, REP, "Location"),
    (5, "function", MSG, REP, "Function"),
    (6, "string_table", STR, REP, None),
    (7, "drop_frames", I64, OPT, None),
    (8, "keep_frames", I64, OPT, None),
    (9, "time_nanos", I64, OPT, None),
    (10, "duration_nanos", I64, OPT, None),
    (11, "period_type", MSG, OPT, "ValueType"),
    (12, "period", I64, OPT, None),
    (13, "comment", I64, REP, None),
    (14, "default_sample_type", I64, OPT, None),
])
message(fdp, "ValueType", [(1, "type", I64, OPT, None), (2, "unit", I64, OPT, None)])
message(fdp, "Sample", [
    (1, "location_id", U64, REP, None),
    (2, "value", I64, REP, None),
    (3, "label", MSG, REP, "Label"),
])
message(fdp, "Label", [
    (1, "key", I64, OPT, None),
    (2, "str", I64, OPT, None),
    (3, "num", I64, OPT, None),
    (4, "num_unit", I64, OPT, None),
])
message(fdp, "Mapping", [
    (1, "id", U64, OPT, None),
    (2, "memory_start", U64, OPT, None),
    (3, "memory_limit", U64, OPT, None),
    (4, "file_offset", U64, OPT, None),
    (5, "filename", I64, OPT, None),
    (6, "build_id", I64, OPT, None),
    (7, "has_functions", BOOL, OPT, None),
    (8, "has_filenames", BOOL, OPT, None),
    (9, "has_line_numbers", BOOL, OPT, None),
    (10, "has_inline_frames", BOOL, OPT, None),
])
message(fdp, "Location", [
    (1, "id", U64, OPT, None),
    (2, "mapping_id", U64, OPT, None),
    (3, "address", U64, OPT, None),
    (4, "line", MSG, REP, "Line"),
    (5, "is_folded", BOOL, OPT, None),
])
message(fdp, "Line", [(1, "function_id", U64, OPT, None), (2, "line", I64, OPT, None)])
message(fdp, "Function", [
    (1, "id", U64, OPT, None),
    (2, "name", I64, OPT, None),
    (3, "system_name", I64, OPT, None),
    (4, "filename", I64, OPT, None),
    (5, "start_line", I64, OPT, None),
])

pool = descriptor_pool.DescriptorPool()
pool.Add(fdp)
Profile = message_factory.GetMessageClass(pool.FindMessageTypeByName("perftools.profiles.Profile"))


def heap(p, binary):
    s = p.string_table
    problems = []
    types = [(s[t.type], s[t.unit]) for t in p.sample_type]
    if types != [("inuse_space", "bytes")]:
        problems.append(f"sample types {types}, not a heap profile's")
    if (s[p.period_type.type], s[p.period_type.unit]) != ("space", "bytes"):
        problems.append("period type must be space/bytes")
    if not p.sample or not any(v > 0 for sample in p.sample for v in sample.value):
        problems.append("no live bytes sampled")
    mappings = {m.id: m for m in p.mapping}
    if not any(binary in s[m.filename] for m in p.mapping):
        problems.append(f"no mapping of {binary!r}: {[s[m.filename] for m in p.mapping][:5]}")
    outside = 0
    for loc in p.location:
        m = mappings.get(loc.mapping_id)
        if m is None or not (m.memory_start <= loc.address < m.memory_limit):
            outside += 1
    if outside:
        problems.append(f"{outside} of {len(p.location)} locations lie outside their mapping")
    total = sum(sample.value[0] for sample in p.sample)
    print(f"{len(p.sample)} stacks, {total} live bytes sampled, {len(p.location)} locations, {len(p.mapping)} mappings")
    return problems


def main():
    if sys.argv[1] == "--heap":
        raw = open(sys.argv[2], "rb").read()
        p = Profile()
        p.ParseFromString(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        problems = heap(p, sys.argv[3])
        for pr in problems:
            print("problem:", pr)
        sys.exit(1 if problems else 0)
    raw = open(sys.argv[1], "rb").read()
    problems = []
    if raw[:2] != b"\x1f\x8b":
        problems.append("not gzipped (pprof profiles are)")
        data = raw
    else:
        data = gzip.decompress(raw)
    p = Profile()
    p.ParseFromString(data)
    s = p.string_table
    if not s or s[0] != "":
        problems.append("string_table[0] must be empty")
    types = [(s[t.type], s[t.unit]) for t in p.sample_type]
    if types != [("samples", "count"), ("cpu", "nanoseconds")]:
        problems.append(f"sample types {types}, not a CPU profile's")
    if (s[p.period_type.type], s[p.period_type.unit]) != ("cpu", "nanoseconds") or p.period <= 0:
        problems.append("period type must be cpu/nanoseconds with a period")
    if not p.sample:
        problems.append("no samples")
    functions = {f.id: f for f in p.function}
    locations = {l.id: l for l in p.location}
    names = set()
    for sample in p.sample:
        if len(sample.value) != 2 or sample.value[0] <= 0:
            problems.append(f"sample values {list(sample.value)}")
            break
        for lid in sample.location_id:
            loc = locations.get(lid)
            if loc is None:
                problems.append(f"sample names location {lid}, which does not exist")
                break
            for line in loc.line:
                f = functions.get(line.function_id)
                if f is None:
                    problems.append(f"location {lid} names function {line.function_id}, which does not exist")
                    break
                names.add(s[f.name])
    for want in sys.argv[2:]:
        if not any(want in n for n in names):
            problems.append(f"no sampled function contains {want!r}")
    total = sum(sample.value[0] for sample in p.sample)
    print(f"{len(p.sample)} stacks, {total} samples, {len(p.function)} functions, "
          f"{p.duration_nanos / 1e9:.1f} s")
    for pr in problems:
        print("problem:", pr)
    sys.exit(1 if problems else 0)


main()
