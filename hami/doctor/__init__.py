"""`hami doctor` and `hami tune`: the runbooks of seeds 001 and 002, automated."""
