"""The embedded Kubernetes: API server, simulated kubelet and nodes, the kube-scheduler loop."""
