"""Preemption for GPU shares: /preempt's victim choice (victims.py), --gpu-preemption's plan
(plan.py), its leader loop of holds, evictions and wakes (controller.py), and the holds shared with
the other replicas through Node annotations (share.py)."""
