"""`python -m bus1py.cli ...`: the `bus1py` command."""
import sys

from .main import main

sys.exit(main())
