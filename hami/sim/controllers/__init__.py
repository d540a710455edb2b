"""The embedded cluster's controllers (kube-controller-manager's, minimal): jobs, resource claims."""
