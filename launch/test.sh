#!/usr/bin/env bash
# Installs everything the test suite needs into ./.venv and runs it.
#   bash launch/test.sh            # the whole suite
#   bash launch/test.sh tests/test_model.py -k causality
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
if [ "$#" -eq 0 ]; then set -- tests; fi
exec .venv/bin/python -m pytest -q -n "${PYTEST_WORKERS:-2}" --durations=15 "$@"
