"""Generated gRPC stubs for the kubelet DRA and plugin registration APIs (scripts/gen-proto)."""
