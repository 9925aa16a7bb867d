"""W&B sweeps: sweep definitions become W&B sweep configurations, run by local agents
(offline, an SQLite store) or by `wandb agent` against the W&B server."""
