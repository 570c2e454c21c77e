# The C helpers are compiled by cffi at install time (out-of-line API mode); setuptools
# only needs this hook, everything else lives in pyproject.toml.
import runpy

from setuptools import setup

setup(ext_modules=[runpy.run_path("bus1py/_build_messages.py")["EXTENSION"]],  # CPython API, not cffi
      cffi_modules=["bus1py/_build.py:ffibuilder", "bus1py/check/_build_walk.py:ffibuilder",
                     "bus1py/sim/_build_fast.py:ffibuilder"])
