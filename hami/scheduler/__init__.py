"""`hami --role scheduler`: HAMi's scheduler extender, in rooms.

placement/ (pure: where a pod's devices go), placer.py (the one owner of a placement decision: it
holds, chooses, re-checks and commits; no HTTP), extender/ (the HTTP verbs kube-scheduler calls and
the binder), admission/ (the mutating webhook), cache/ (the watch-fed view of the cluster and what
follows its changes), preemption/ (/preempt's victims and --gpu-preemption), role.py (the wiring),
relay.py, metrics.py. Kubernetes' own scheduling rules are in hami.kubesched.
"""
