"""The only code that talks to the Kubernetes API server: client, informers, node lock, events, leases."""
