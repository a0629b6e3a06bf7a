#!/usr/bin/env bash
# Runs any entry point on this machine, optionally on N fake CPU devices
# (to try a mesh without accelerators), optionally restarting it when it
# crashes (launch/supervise.py: backoff, <workdir>/restarts.jsonl).
#   launch/local.sh experiments/train_rl.py --config=configs/grpo_arithmetic.py:tiny --workdir=/tmp/x
#   launch/local.sh --devices=8 experiments/train_rl.py --config=configs/grpo_arithmetic.py:tiny \
#       --workdir=/tmp/x --config.mesh.data=2 --config.mesh.fsdp=2 --config.mesh.tensor=2
#   launch/local.sh --restart_on_failure=3 experiments/train_rl.py \
#       --config=configs/grpo_arithmetic.py:tiny --workdir=/tmp/x
set -euo pipefail
cd "$(dirname "$0")/.."
SUPERVISE=()
while [[ "${1:-}" == --devices=* || "${1:-}" == --restart_on_failure=* ]]; do
  case "$1" in
    --devices=*)
      [[ "${1#--devices=}" =~ ^[1-9][0-9]*$ ]] || {
        echo "error: --devices='${1#--devices=}': must be an int >= 1 (fake CPU devices)" >&2
        exit 2; }
      export XLA_FLAGS="--xla_force_host_platform_device_count=${1#--devices=} ${XLA_FLAGS:-}"
      export JAX_PLATFORMS=cpu ;;
    --restart_on_failure=*)
      SUPERVISE=(launch/supervise.py "$1" --) ;;
  esac
  shift
done
# The interpreter: $PYTHON if set, else ./.venv (made by launch/test.sh or demo.sh), else python3.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  PY=python3
  [ -x .venv/bin/python ] && PY=.venv/bin/python
fi
if [ "${#SUPERVISE[@]}" -gt 0 ]; then
  exec "$PY" "${SUPERVISE[@]}" "$PY" "$@"
fi
exec "$PY" "$@"
