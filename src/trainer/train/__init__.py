"""Training itself: model and optimizer builders, the step, the epoch loop, checkpoints and resume."""
