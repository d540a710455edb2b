"""hami: GPU sharing control plane for Kubernetes, wire-compatible with HAMi v2.10."""

__version__ = "0.1.0"
