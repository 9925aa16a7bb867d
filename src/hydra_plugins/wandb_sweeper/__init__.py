"""`hydra/sweeper=wandb`: Hydra multiruns become W&B sweeps (local agents or the W&B server)."""
