"""What this machine gives a run: devices, processes (DDP), CPU limits and thread pools."""
