#!/bin/sh
# A release's files into wheelhouse/: the sdist, and one manylinux wheel per CPython
# (3.10 to 3.14) for this machine's architecture, built in the manylinux_2_28 containers by
# cibuildwheel as pyproject's [tool.cibuildwheel] says, each tested in its container by
# running the README's first example (tools/readme_example.py).  Needs docker or podman; run
# it once on an x86_64 and once on an aarch64 machine (or CI runner), then upload
# wheelhouse/ with `twine upload wheelhouse/*`.  Without containers, `make dist` builds and
# checks this interpreter's wheel the same way (tools/dist.py).
set -eu
cd "$(dirname "$0")/.."
python3 -m pip install -q 'cibuildwheel>=2.22' 'build>=1' twine
rm -rf wheelhouse
# built from the committed tree (git archive), never the work tree: nothing untracked or
# half-edited can ship
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
git archive HEAD | tar -x -C "$tree"
python3 -m build --sdist --outdir wheelhouse "$tree"
python3 -m cibuildwheel --output-dir wheelhouse "$tree"
python3 -m twine check --strict wheelhouse/*
ls -l wheelhouse
