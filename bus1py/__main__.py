"""`python -m bus1py ...`: the `bus1py` command."""
import sys

from .cli.main import main

sys.exit(main())
