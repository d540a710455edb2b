"""`hami --role dra`: the kubelet DRA plugin, its CDI specs, checkpoint and ResourceSlices."""
