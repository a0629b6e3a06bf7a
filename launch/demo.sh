#!/usr/bin/env bash
# Installs rl_post into ./.venv and runs the end-to-end demo.
#   bash launch/demo.sh                      # workdir /tmp/rl_post_demo
#   bash launch/demo.sh --workdir=/tmp/x --config=configs/demo.py:tiny
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
exec .venv/bin/python experiments/demo.py "$@"
