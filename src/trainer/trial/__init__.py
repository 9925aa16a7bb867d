"""The trial contract: what a run reads and writes for the agent that started it (its argv with
the exact values, the parameter file with W&B's agent environment, a PBT member's files). Both
the training and the sweep side import it; it imports no other project room."""
