#!/usr/bin/env bash
# Creates the benchmark baselines' own virtual environments (never the library's .venv):
#   $ENVS/trl    trl==1.16.0 with a CPU torch, the transformers it accepts and reasoning-gym
#   $ENVS/tunix  google-tunix==0.1.7 with the jax/flax it resolves
# and writes each env's resolved versions to $ENVS/<name>/versions.txt.
#   bash experiments/benchmarks/setup_baselines.sh            # both
#   bash experiments/benchmarks/setup_baselines.sh trl        # one
# ENVS defaults to /work/envs; PYTHON to python3.11. rl_post itself never imports
# trl, torch or tunix: the benchmarks run those sides as subprocesses with these envs.
set -euo pipefail

ENVS=${ENVS:-/work/envs}
PYTHON=${PYTHON:-python3.11}
# sentencepiece loads our tokenizer model on the TRL side (trl_side.py); reasoning-gym
# (the library's pin) lets it verify our rg/<generator> domains with our own code.
TRL_PINS=(trl==1.16.0 "torch==2.13.0" "transformers==5.24.0" "sentencepiece==0.2.3"
          "reasoning-gym==0.1.25")
TUNIX_PINS=(google-tunix==0.1.7)
WANTED=("$@")
[ ${#WANTED[@]} -eq 0 ] && WANTED=(trl tunix)
mkdir -p "$ENVS"

make_env() {  # name, pins...
  local name=$1; shift
  local dir="$ENVS/$name"
  rm -rf "$dir"
  "$PYTHON" -m venv "$dir"
  "$dir/bin/pip" install --quiet --upgrade pip
  # torch resolves to the CPU wheel where one is on the find-links path; otherwise
  # the CPU index of PyTorch is tried (no CUDA libraries on a CPU machine).
  "$dir/bin/pip" install --quiet "$@" \
    || "$dir/bin/pip" install --quiet --extra-index-url https://download.pytorch.org/whl/cpu "$@"
  "$dir/bin/pip" freeze > "$dir/versions.txt"
  echo "== $name: $dir"
  grep -iE '^(trl|torch|transformers|accelerate|datasets|google-tunix|jax|jaxlib|flax|optax|qwix)==' \
    "$dir/versions.txt" || true
}

for name in "${WANTED[@]}"; do
  case $name in
    trl) make_env trl "${TRL_PINS[@]}" ;;
    tunix)
      if ! make_env tunix "${TUNIX_PINS[@]}" 2> "$ENVS/tunix_install.log"; then
        echo "== tunix: install failed; see $ENVS/tunix_install.log" >&2
        tail -20 "$ENVS/tunix_install.log" >&2
        exit 1
      fi ;;
    *) echo "unknown baseline '$name' (trl | tunix)" >&2; exit 2 ;;
  esac
done
