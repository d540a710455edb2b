"""`hami --role ui`: a read-only web page over the GPU cluster (docs/ui.md)."""
