"""Data files of the GPU backends (MIG geometries of the fake backend)."""
