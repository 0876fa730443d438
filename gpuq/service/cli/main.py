"""The `gpuq` console script (`python -m gpuq.service.cli.main` works too); the commands
live in `gpuq.service.cli.app`."""

import sys

from gpuq.service.cli.app import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
