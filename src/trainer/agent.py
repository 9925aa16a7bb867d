"""`python -m trainer.agent SWEEP [--count K]`: join a local sweep from any terminal. The command
lives on the sweep side (`trainer.sweep.agent_cli`); this module is its entry point."""

from __future__ import annotations

import sys

from trainer.sweep.agent_cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
