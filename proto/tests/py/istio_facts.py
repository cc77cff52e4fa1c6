"""Facts about Istio's own protobuf schemas, transcribed by hand from upstream.

Used by conformance.py to catch mistakes in proto/protos/istio/**: every
message, field, enum and service method our files declare must appear here
with the same number, type, label, type name and oneof, and everything here
must be declared by our files.

Shapes:
  FACTS[message_full_name][field_name] =
      (number, type, label, type_name_or_None, oneof_name_or_None)
    * type / label are FieldDescriptorProto enum names ("TYPE_STRING",
      "LABEL_REPEATED", ...).
    * type_name is the fully qualified message/enum name without a leading
      dot, None for scalar fields.
    * map<K, V> fields are LABEL_REPEATED TYPE_MESSAGE pointing at the
      synthesized <Message>.<Field>Entry, which is itself listed (fields key=1,
      value=2), as protoc emits it.
    * proto3 `optional` scalars record oneof None: the synthetic "_name" oneof
      protoc adds is not a real oneof (conformance.py ignores it); such fields
      are listed in PROTO3_OPTIONAL instead.
  ENUM_FACTS[enum_full_name] = {value_name: number}
  SERVICE_FACTS[service_full_name][method] =
      (input_full_name, output_full_name, client_streaming, server_streaming)
  RESERVED_FACTS[message_full_name] = (reserved_numbers, reserved_names)
  PROTO3_OPTIONAL = set of "message_full_name.field" declared `optional`.
"""

SOURCE = (
    "istio/api security/v1alpha1/ca.proto at commit "
    "b8f8791d9653b2edc77a071d48887e582cfe84bf (file last changed in "
    "65babd3c01db1f6f324703c74faa92907dc576ad); "
    "istio/istio pkg/workloadapi/workload.proto at commit "
    "86c9f01fd735fb01d8192f5bcaf0d424afb7f14c (file last changed in "
    "62a02d9ae9637689e54a5c06ef1ee09407877fe6), identical apart from "
    "go_package to istio/ztunnel proto/workload.proto at commit "
    "62d826530e5ce85764e309170205b293efcbc80b (file last changed in "
    "3b80cf3ed07720300b8dd7e6fe4f5b148aa73800); "
    "istio/istio pkg/workloadapi/security/authorization.proto at commit "
    "86c9f01fd735fb01d8192f5bcaf0d424afb7f14c (ztunnel's copy at 62d8265 "
    "names Group `Rule` and Rules `Clause`, same numbers); "
    "istio/istio pkg/dns/proto/nds.proto at commit "
    "86c9f01fd735fb01d8192f5bcaf0d424afb7f14c; "
    "istio/api mesh/v1alpha1/proxy.proto at commit "
    "00d4ed3c5930e11fa4a7b8b8c2eea95d3bba8d00 (ProxyConfig's "
    "ca_certificates_pem only: the one field PCDS carries)"
)

_O = "LABEL_OPTIONAL"
_R = "LABEL_REPEATED"
_W = "istio.workload."
_S = "istio.security."
_N = "istio.networking.nds.v1."

FACTS = {
    # ---- istio.mesh.v1alpha1 (mesh/v1alpha1/proxy.proto), PCDS's field ------
    "istio.mesh.v1alpha1.ProxyConfig": {
        "ca_certificates_pem": (34, "TYPE_STRING", _R, None, None),
    },
    # ---- istio.networking.nds.v1 (pkg/dns/proto/nds.proto) -------------------
    _N + "NameTable": {
        "table": (1, "TYPE_MESSAGE", _R, _N + "NameTable.TableEntry", None),
    },
    # map<string, NameInfo> table = 1;
    _N + "NameTable.TableEntry": {
        "key": (1, "TYPE_STRING", _O, None, None),
        "value": (2, "TYPE_MESSAGE", _O, _N + "NameTable.NameInfo", None),
    },
    _N + "NameTable.NameInfo": {
        "ips": (1, "TYPE_STRING", _R, None, None),
        "registry": (2, "TYPE_STRING", _O, None, None),
        "shortname": (3, "TYPE_STRING", _O, None, None),
        "namespace": (4, "TYPE_STRING", _O, None, None),
        "alt_hosts": (5, "TYPE_STRING", _R, None, None),
    },
    # ---- istio.security (security/authorization.proto) ----------------------
    _S + "Authorization": {
        "name": (1, "TYPE_STRING", _O, None, None),
        "namespace": (2, "TYPE_STRING", _O, None, None),
        "scope": (3, "TYPE_ENUM", _O, _S + "Scope", None),
        "action": (4, "TYPE_ENUM", _O, _S + "Action", None),
        "groups": (5, "TYPE_MESSAGE", _R, _S + "Group", None),
        "dry_run": (6, "TYPE_BOOL", _O, None, None),
        "extensions": (7, "TYPE_MESSAGE", _R, _W + "Extension", None),
    },
    _S + "Group": {
        "rules": (1, "TYPE_MESSAGE", _R, _S + "Rules", None),
    },
    _S + "Rules": {
        "matches": (2, "TYPE_MESSAGE", _R, _S + "Match", None),
    },
    _S + "Match": {
        "namespaces": (1, "TYPE_MESSAGE", _R, _S + "StringMatch", None),
        "not_namespaces": (2, "TYPE_MESSAGE", _R, _S + "StringMatch", None),
        "service_accounts": (11, "TYPE_MESSAGE", _R, _S + "ServiceAccountMatch", None),
        "not_service_accounts": (12, "TYPE_MESSAGE", _R, _S + "ServiceAccountMatch", None),
        "principals": (3, "TYPE_MESSAGE", _R, _S + "StringMatch", None),
        "not_principals": (4, "TYPE_MESSAGE", _R, _S + "StringMatch", None),
        "source_ips": (5, "TYPE_MESSAGE", _R, _S + "Address", None),
        "not_source_ips": (6, "TYPE_MESSAGE", _R, _S + "Address", None),
        "destination_ips": (7, "TYPE_MESSAGE", _R, _S + "Address", None),
        "not_destination_ips": (8, "TYPE_MESSAGE", _R, _S + "Address", None),
        "destination_ports": (9, "TYPE_UINT32", _R, None, None),
        "not_destination_ports": (10, "TYPE_UINT32", _R, None, None),
        "extensions": (13, "TYPE_MESSAGE", _R, _W + "Extension", None),
    },
    _S + "Address": {
        "address": (1, "TYPE_BYTES", _O, None, None),
        "length": (2, "TYPE_UINT32", _O, None, None),
    },
    _S + "ServiceAccountMatch": {
        "namespace": (1, "TYPE_STRING", _O, None, None),
        "serviceAccount": (2, "TYPE_STRING", _O, None, None),
    },
    _S + "StringMatch": {
        "exact": (1, "TYPE_STRING", _O, None, "match_type"),
        "prefix": (2, "TYPE_STRING", _O, None, "match_type"),
        "suffix": (3, "TYPE_STRING", _O, None, "match_type"),
        "presence": (4, "TYPE_MESSAGE", _O, "google.protobuf.Empty", "match_type"),
    },
    # ---- istio.v1.auth (security/v1alpha1/ca.proto) -------------------------
    "istio.v1.auth.IstioCertificateRequest": {
        "csr": (1, "TYPE_STRING", _O, None, None),
        "validity_duration": (3, "TYPE_INT64", _O, None, None),
        "metadata": (4, "TYPE_MESSAGE", _O, "google.protobuf.Struct", None),
    },
    "istio.v1.auth.IstioCertificateResponse": {
        "cert_chain": (1, "TYPE_STRING", _R, None, None),
    },
    # ---- istio.workload (workload.proto) ------------------------------------
    _W + "Address": {
        "workload": (1, "TYPE_MESSAGE", _O, _W + "Workload", "type"),
        "service": (2, "TYPE_MESSAGE", _O, _W + "Service", "type"),
    },
    _W + "Service": {
        "name": (1, "TYPE_STRING", _O, None, None),
        "namespace": (2, "TYPE_STRING", _O, None, None),
        "hostname": (3, "TYPE_STRING", _O, None, None),
        "addresses": (4, "TYPE_MESSAGE", _R, _W + "NetworkAddress", None),
        "ports": (5, "TYPE_MESSAGE", _R, _W + "Port", None),
        "subject_alt_names": (6, "TYPE_STRING", _R, None, None),
        "waypoint": (7, "TYPE_MESSAGE", _O, _W + "GatewayAddress", None),
        "load_balancing": (8, "TYPE_MESSAGE", _O, _W + "LoadBalancing", None),
        "ip_families": (9, "TYPE_ENUM", _O, _W + "IPFamilies", None),
        "extensions": (10, "TYPE_MESSAGE", _R, _W + "Extension", None),
        "canonical": (11, "TYPE_BOOL", _O, None, None),
        "ingress_use_waypoint": (12, "TYPE_BOOL", _O, None, None),
        "weighted_waypoints": (13, "TYPE_MESSAGE", _R, _W + "WeightedWaypoint", None),
        "visibility": (14, "TYPE_ENUM", _O, _W + "Service.Visibility", None),
    },
    _W + "LoadBalancing": {
        "routing_preference": (1, "TYPE_ENUM", _R, _W + "LoadBalancing.Scope", None),
        "mode": (2, "TYPE_ENUM", _O, _W + "LoadBalancing.Mode", None),
        "health_policy": (3, "TYPE_ENUM", _O, _W + "LoadBalancing.HealthPolicy", None),
    },
    _W + "Workload": {
        "uid": (20, "TYPE_STRING", _O, None, None),
        "name": (1, "TYPE_STRING", _O, None, None),
        "namespace": (2, "TYPE_STRING", _O, None, None),
        "addresses": (3, "TYPE_BYTES", _R, None, None),
        "hostname": (21, "TYPE_STRING", _O, None, None),
        "network": (4, "TYPE_STRING", _O, None, None),
        "tunnel_protocol": (5, "TYPE_ENUM", _O, _W + "TunnelProtocol", None),
        "trust_domain": (6, "TYPE_STRING", _O, None, None),
        "service_account": (7, "TYPE_STRING", _O, None, None),
        "waypoint": (8, "TYPE_MESSAGE", _O, _W + "GatewayAddress", None),
        "network_gateway": (19, "TYPE_MESSAGE", _O, _W + "GatewayAddress", None),
        "node": (9, "TYPE_STRING", _O, None, None),
        "canonical_name": (10, "TYPE_STRING", _O, None, None),
        "canonical_revision": (11, "TYPE_STRING", _O, None, None),
        "workload_type": (12, "TYPE_ENUM", _O, _W + "WorkloadType", None),
        "workload_name": (13, "TYPE_STRING", _O, None, None),
        "native_tunnel": (14, "TYPE_BOOL", _O, None, None),
        "application_tunnel": (23, "TYPE_MESSAGE", _O, _W + "ApplicationTunnel", None),
        "services": (22, "TYPE_MESSAGE", _R, _W + "Workload.ServicesEntry", None),
        "authorization_policies": (16, "TYPE_STRING", _R, None, None),
        "status": (17, "TYPE_ENUM", _O, _W + "WorkloadStatus", None),
        "cluster_id": (18, "TYPE_STRING", _O, None, None),
        "locality": (24, "TYPE_MESSAGE", _O, _W + "Locality", None),
        "network_mode": (25, "TYPE_ENUM", _O, _W + "NetworkMode", None),
        "extensions": (26, "TYPE_MESSAGE", _R, _W + "Extension", None),
        "capacity": (27, "TYPE_MESSAGE", _O, "google.protobuf.UInt32Value", None),
    },
    # map<string, PortList> services = 22;
    _W + "Workload.ServicesEntry": {
        "key": (1, "TYPE_STRING", _O, None, None),
        "value": (2, "TYPE_MESSAGE", _O, _W + "PortList", None),
    },
    _W + "Locality": {
        "region": (1, "TYPE_STRING", _O, None, None),
        "zone": (2, "TYPE_STRING", _O, None, None),
        "subzone": (3, "TYPE_STRING", _O, None, None),
    },
    _W + "PortList": {
        "ports": (1, "TYPE_MESSAGE", _R, _W + "Port", None),
    },
    _W + "Port": {
        "service_port": (1, "TYPE_UINT32", _O, None, None),
        "target_port": (2, "TYPE_UINT32", _O, None, None),
        "app_protocol": (3, "TYPE_ENUM", _O, _W + "AppProtocol", None),
    },
    _W + "ApplicationTunnel": {
        "protocol": (1, "TYPE_ENUM", _O, _W + "ApplicationTunnel.Protocol", None),
        "port": (2, "TYPE_UINT32", _O, None, None),
    },
    _W + "GatewayAddress": {
        "hostname": (1, "TYPE_MESSAGE", _O, _W + "NamespacedHostname", "destination"),
        "address": (2, "TYPE_MESSAGE", _O, _W + "NetworkAddress", "destination"),
        "hbone_mtls_port": (3, "TYPE_UINT32", _O, None, None),
    },
    _W + "WeightedWaypoint": {
        "destination": (1, "TYPE_MESSAGE", _O, _W + "GatewayAddress", None),
        "weight": (2, "TYPE_UINT32", _O, None, None),
    },
    _W + "NetworkAddress": {
        "network": (1, "TYPE_STRING", _O, None, None),
        "address": (2, "TYPE_BYTES", _O, None, None),
        # `optional uint32 length = 3;` (proto3 optional, see PROTO3_OPTIONAL)
        "length": (3, "TYPE_UINT32", _O, None, None),
    },
    _W + "NamespacedHostname": {
        "namespace": (1, "TYPE_STRING", _O, None, None),
        "hostname": (2, "TYPE_STRING", _O, None, None),
    },
    _W + "Extension": {
        "name": (1, "TYPE_STRING", _O, None, None),
        "config": (2, "TYPE_MESSAGE", _O, "google.protobuf.Any", None),
    },
}

ENUM_FACTS = {
    _S + "Scope": {"GLOBAL": 0, "NAMESPACE": 1, "WORKLOAD_SELECTOR": 2},
    _S + "Action": {"ALLOW": 0, "DENY": 1},
    _W + "Service.Visibility": {"PUBLIC": 0, "NAMESPACE": 1},
    _W + "IPFamilies": {"AUTOMATIC": 0, "IPV4_ONLY": 1, "IPV6_ONLY": 2, "DUAL": 3},
    _W + "NetworkMode": {"STANDARD": 0, "HOST_NETWORK": 1},
    _W + "LoadBalancing.Scope": {
        "UNSPECIFIED_SCOPE": 0,
        "REGION": 1,
        "ZONE": 2,
        "SUBZONE": 3,
        "NODE": 4,
        "CLUSTER": 5,
        "NETWORK": 6,
    },
    _W + "LoadBalancing.Mode": {
        "UNSPECIFIED_MODE": 0,
        "STRICT": 1,
        "FAILOVER": 2,
        "PASSTHROUGH": 3,
    },
    _W + "LoadBalancing.HealthPolicy": {"ONLY_HEALTHY": 0, "ALLOW_ALL": 1},
    _W + "WorkloadStatus": {"HEALTHY": 0, "UNHEALTHY": 1},
    _W + "WorkloadType": {"DEPLOYMENT": 0, "CRONJOB": 1, "POD": 2, "JOB": 3},
    _W + "AppProtocol": {
        "UNKNOWN": 0,
        "HTTP11": 1,
        "HTTP2": 2,
        "GRPC": 3,
        "TCP": 4,
        "TLS": 5,
    },
    _W + "TunnelProtocol": {"NONE": 0, "HBONE": 1, "LEGACY_ISTIO_MTLS": 2},
    _W + "ApplicationTunnel.Protocol": {"NONE": 0, "PROXY": 1},
}

SERVICE_FACTS = {
    "istio.v1.auth.IstioCertificateService": {
        "CreateCertificate": (
            "istio.v1.auth.IstioCertificateRequest",
            "istio.v1.auth.IstioCertificateResponse",
            False,
            False,
        ),
    },
}

# Reserved ranges/names as declared upstream (single numbers only occur).
RESERVED_FACTS = {
    _W + "Workload": ((15,), ()),
    _W + "GatewayAddress": ((4,), ("hbone_single_tls_port",)),
}

PROTO3_OPTIONAL = {
    _W + "NetworkAddress.length",
}

# Imports upstream uses, per file (path relative to proto/protos).
IMPORT_FACTS = {
    "istio/security/v1alpha1/ca.proto": ("istio.v1.auth", ("google/protobuf/struct.proto",)),
    "istio/workload/workload.proto": (
        "istio.workload",
        ("google/protobuf/wrappers.proto", "google/protobuf/any.proto"),
    ),
}
