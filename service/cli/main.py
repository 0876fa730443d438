"""The `gpuq` console script (`python -m service.cli.main` works too); the commands
live in `service.cli.app`."""

import sys

from service.cli.app import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
