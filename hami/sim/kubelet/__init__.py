"""The simulated kubelet: device manager, DRA manager, pod start and stop, vendor nodes."""
