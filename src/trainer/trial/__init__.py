"""The trial interface: what a sweep agent hands a trial (its argv with the exact values, the
parameter file and W&B's agent environment); the one part of the sweep side training reads."""
