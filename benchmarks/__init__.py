"""Benchmarks of compile modes and framework overhead; run them as `python -m benchmarks.<name>`."""
