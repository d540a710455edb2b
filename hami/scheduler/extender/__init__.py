"""The kube-scheduler extender over HTTP: /filter and /bind (server.py), their body decoders
(extargs.py, nodescan.py), /prioritize and /preempt (verbs.py), the binder's node lock and Binding
(bind.py) and the vgpu-node label after it (labeler.py). Every decision is hami.scheduler.placer's."""
