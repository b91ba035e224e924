#!/usr/bin/env bash
# Set-up shared by tests/run, bench/run and spark/run: build amqwire from this checkout once, the
# way a user's pip does from PyPI: an sdist first, then a compiled wheel from that sdist alone (in
# pip's isolated build environment), both in dist/; then install the wheel with the given extra
# into .venv.  So every test run proves the sdist ships what a build needs.
#   usage: bash tests/venv.sh EXTRA        (run from the repository root)
set -euo pipefail
extra="$1"
python="${PYTHON:-python3}"
[[ -x .venv/bin/python ]] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip build
# Rebuild unless dist/ holds a wheel newer than every source file (spark/run after tests/run).
wheel=$(ls dist/amqwire-*.whl 2>/dev/null | head -n 1 || true)
if [[ -z "$wheel" ]] || [[ -n "$(find codec client spark bridge cli setup.py pyproject.toml MANIFEST.in LICENSE -newer "$wheel" \
      -not -name '*.c' -not -name '*.so' -not -name '*.html' -not -path '*/__pycache__*' | head -n 1)" ]]; then
  rm -rf dist
  .venv/bin/python -m build -q --sdist --outdir dist .
  .venv/bin/python -m pip wheel -q --no-deps -w dist dist/amqwire-*.tar.gz
  wheel=$(ls dist/amqwire-*.whl)
fi
# A wheel with extras installs without rebuilding; force it over an older build of the
# same version, then add the extra's dependencies.
.venv/bin/python -m pip install -q --force-reinstall --no-deps "$wheel"
.venv/bin/python -m pip install -q "$wheel[$extra]"
