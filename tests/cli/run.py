"""Run the `bus1py` command line as a user does, optionally as if some packages were not
installed: `python tests/cli/run.py --without rich,numpy -- stress ...`.

A package left out cannot be imported (ModuleNotFoundError, exactly as when it is not
installed), so the command's own handling of a missing extra is what runs.
"""
import importlib.abc
import sys


class Without(importlib.abc.MetaPathFinder):
    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["--without"]:
        sys.meta_path.insert(0, Without(argv[1].split(",")))
        argv = argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if argv[:1] == ["-c"]:       # run code instead of the command line
        exec(compile(argv[1], "<code>", "exec"), {"__name__": "__main__"})
        sys.exit(0)
    from bus1py.cli import main
    sys.exit(main(argv))
