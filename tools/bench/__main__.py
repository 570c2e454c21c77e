"""`python tools/bench` and `python -m tools.bench` (from the repository root)."""
import sys
from pathlib import Path

if not __package__:
    # run as a directory: its own folder is sys.path[0], where module names like `report`
    # would shadow others; import the package from the repository root instead
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from tools.bench.cli import main  # noqa: E402

sys.exit(main())
