#!/usr/bin/env bash
# Set-up shared by tests/run, bench/run and spark/run: build amqwire from this checkout once, the
# way a user's pip does from PyPI: an sdist first, then a compiled wheel from that sdist alone (in
# pip's isolated build environment), both in dist/; then install the wheel with the given extra
# into .venv.  So every test run proves the sdist ships what a build needs.
#   usage: bash tests/venv.sh EXTRA        (run from the repository root)
# Quiet: one line when it builds, none when nothing changed.  What the build and pip say goes to
# .venv/setup.log, which a failure names (with its last lines).
set -euo pipefail
extra="$1"
python="${PYTHON:-python3}"
[[ -x .venv/bin/python ]] || "$python" -m venv .venv
log="$PWD/.venv/setup.log"
: >"$log"

quietly() {  # quietly WHAT COMMAND...: run COMMAND with its output in the log; on failure say where it is
  local what="$1"
  shift
  echo "+ $*" >>"$log"
  if ! "$@" >>"$log" 2>&1; then
    echo "tests/venv.sh: $what failed; its output is in $log, which ends:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
}

quietly "updating pip and build in .venv" .venv/bin/python -m pip install -q --upgrade pip build
# Rebuild unless dist/ holds a wheel newer than every source file (spark/run after tests/run).
wheel=$(ls dist/amqwire-*.whl 2>/dev/null | head -n 1 || true)
if [[ -z "$wheel" ]] || [[ -n "$(find codec client spark bridge cli setup.py pyproject.toml MANIFEST.in LICENSE -newer "$wheel" \
      -not -name '*.c' -not -name '*.so' -not -name '*.html' -not -path '*/__pycache__*' | head -n 1)" ]]; then
  echo "building amqwire from this checkout: an sdist, then a compiled wheel from it (a few minutes; log: $log)"
  rm -rf dist
  quietly "building the sdist" .venv/bin/python -m build --sdist --outdir dist .
  quietly "building the wheel from the sdist" .venv/bin/python -m pip wheel --no-deps -w dist dist/amqwire-*.tar.gz
  wheel=$(ls dist/amqwire-*.whl)
fi
# A wheel with extras installs without rebuilding; force it over an older build of the
# same version, then add the extra's dependencies.
quietly "installing $wheel" .venv/bin/python -m pip install -q --force-reinstall --no-deps "$wheel"
quietly "installing the $extra extra's dependencies" .venv/bin/python -m pip install -q "$wheel[$extra]"
