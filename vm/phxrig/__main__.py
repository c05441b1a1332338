"""python3 -m phxrig fetch|run (from vm/), or python3 vm/phxrig fetch|run."""

import sys

if __package__:
    from .cli import main
else:
    # Run as a folder (vm/run, vm/fetch-kernels): import it as the package.
    from pathlib import Path
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
    from phxrig.cli import main

sys.exit(main())
