"""Kubernetes' own scheduling rules, pure (.importlinter's `pure-kubesched` contract), shared by
the extender, the embedded kube-scheduler loop, whatif and the doctor: taints, node affinity, PDBs,
the in-tree filters and scores, the scheduling queue, preemption's dry run, the DRA structured
allocator with its pools, consumable capacity and CEL, and the Cluster Autoscaler's view. Tested
against upstream's own cases, ported as golden files (tests/kubesched)."""
