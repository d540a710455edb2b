"""`hami whatif`: replay a cluster snapshot through the scheduler's own code to plan capacity."""
