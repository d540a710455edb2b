"""The scheduler's view of the cluster, fed only by watches (state.py, what the caches keep:
project.py), the node handshake (handshake.py), who last held each node lock (lockhistory.py), and
waking parked pods when capacity frees (waker.py; which ones: requeue.py)."""
