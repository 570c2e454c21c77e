# Every target sets up what it needs: a fresh machine only needs python3, gcc and a JDK.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test bench dist docs typecheck clean

$(STAMP): pyproject.toml setup.py bus1py/_build.py bus1py/check/_build_walk.py \
          bus1py/sim/_build_fast.py bus1py/_build_messages.py $(wildcard csrc/py/*.c csrc/py/*.h) \
          $(wildcard csrc/bus/*.c csrc/bus/*.h csrc/check/*.c csrc/check/*.h csrc/sim/*.c csrc/sim/*.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all]'
	touch $@

run: $(STAMP)
	$(VENV)/bin/bus1py demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup

bench: $(STAMP)
	$(PY) tools/bench

# an sdist and a manylinux wheel for this interpreter in dist/ (a release's wheels for every
# CPython come from tools/release.sh)
dist: $(STAMP)
	$(PY) tools/dist.py

# the API reference and the documents beside it, as HTML in build/docs/ (-E: every page read
# anew, so a warning of an unchanged page still fails the build)
docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -E -q -b html -d build/doctrees docs build/docs

typecheck: $(STAMP)
	$(PY) -m mypy

clean:
	rm -rf $(VENV) build dist *.egg-info bus1py/_b1*.so bus1py/_messages*.so bus1py/_b1.c bus1py/check/_walk*.so bus1py/sim/_fast*.so .pytest_cache .hypothesis
