"""Training itself: model and optimizer builders, speed flags, the step, the epoch loop, its
metrics row, checkpoints and resume."""
