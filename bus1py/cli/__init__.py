"""The `bus1py` command line, apart from the bus: the bus's modules never import it.

main.py dispatches to the subcommands (each registered by the module beside the code it
drives: stress/cli.py, check/cli.py, sim/cli.py, and admin.py, fsck.py here); options.py
says what the options accept, term.py where human output goes.
"""
from .main import main

__all__ = ["main"]
