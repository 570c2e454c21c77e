# The C helpers are compiled by cffi at install time (out-of-line API mode); setuptools
# only needs this hook, everything else lives in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["bus1py/_build.py:ffibuilder", "bus1py/check/_build_walk.py:ffibuilder",
                     "bus1py/sim/_build_fast.py:ffibuilder"])
