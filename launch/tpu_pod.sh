#!/usr/bin/env bash
# Runs an entry point on every worker of a Cloud TPU VM slice (multi-host JAX).
#
#   launch/tpu_pod.sh --name=rl-pod --zone=us-east5-a --accelerator=v5p-64 [--project=P] \
#       [--version=v2-alpha-tpuv5] [--spot] [--reuse] [--dry_run] -- \
#       experiments/train_rl.py --config=configs/smollm2_135m_grpo.py --workdir=gs://bucket/run
#
# Steps (each printed as "+ command"; --dry_run prints them and runs nothing):
#   1. reuse the slice if `describe` finds it (--reuse: it must exist), else create it;
#   2. pack the tracked files of this checkout and scp them to every worker;
#   3. on every worker: unpack to ~/rl_post, make a venv, pip install the package + jax[tpu];
#   4. on every worker: run the entry point with --config.distributed.mode=auto and
#      RL_POST_CLUSTER=tpu (JAX finds the coordinator and process ids in the TPU metadata).
# The workdir should be on a bucket or shared disk: orbax checkpoints are written by
# every process, metrics and reports by process 0 (docs/scale.md).
set -euo pipefail
cd "$(dirname "$0")/.."

NAME="" ZONE="" ACCEL="" PROJECT="" VERSION="" SPOT=0 REUSE=0 DRY_RUN=0
JAX_TPU="jax[tpu]==0.10.2"
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --name=*) NAME=${1#*=} ;;
    --zone=*) ZONE=${1#*=} ;;
    --accelerator=*) ACCEL=${1#*=} ;;
    --project=*) PROJECT=${1#*=} ;;
    --version=*) VERSION=${1#*=} ;;
    --spot) SPOT=1 ;;
    --reuse) REUSE=1 ;;
    --dry_run) DRY_RUN=1 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) echo "tpu_pod.sh: unknown flag $1 (entry point and its flags go after --)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$NAME" ] || { echo "tpu_pod.sh: --name is required" >&2; exit 2; }
[ -n "$ZONE" ] || { echo "tpu_pod.sh: --zone is required" >&2; exit 2; }
[ $# -gt 0 ] || { echo "tpu_pod.sh: give the entry point after --, e.g. -- experiments/train_rl.py --config=..." >&2; exit 2; }
[ -f "$1" ] || { echo "tpu_pod.sh: entry point $1 does not exist in this checkout" >&2; exit 2; }
if [ -z "$VERSION" ]; then
  case "$ACCEL" in
    v5litepod-*|v5e-*) VERSION=v2-alpha-tpuv5-lite ;;
    v5p-*) VERSION=v2-alpha-tpuv5 ;;
    v6e-*) VERSION=v2-alpha-tpuv6e ;;
    *) VERSION=tpu-ubuntu2204-base ;;
  esac
fi

GCLOUD=(gcloud compute tpus tpu-vm)
WHERE=(--zone="$ZONE")
[ -n "$PROJECT" ] && WHERE+=(--project="$PROJECT")
run() {  # prints the command, then runs it unless --dry_run
  printf '+'; printf ' %q' "$@"; printf '\n'
  [ "$DRY_RUN" = 1 ] || "$@"
}

# 1. Create or reuse the slice.
CREATE=("${GCLOUD[@]}" create "$NAME" "${WHERE[@]}" --accelerator-type="$ACCEL" --version="$VERSION")
[ "$SPOT" = 1 ] && CREATE+=(--spot)
if [ "$DRY_RUN" = 1 ]; then
  run "${GCLOUD[@]}" describe "$NAME" "${WHERE[@]}" --format=value\(state\)
  if [ "$REUSE" = 0 ]; then
    [ -n "$ACCEL" ] || { echo "tpu_pod.sh: --accelerator is required to create a slice" >&2; exit 2; }
    echo "# only if describe finds no slice:"; run "${CREATE[@]}"
  fi
elif run "${GCLOUD[@]}" describe "$NAME" "${WHERE[@]}" --format=value\(state\); then
  echo "reusing TPU slice $NAME"
elif [ "$REUSE" = 1 ]; then
  echo "tpu_pod.sh: --reuse given but slice $NAME does not exist in $ZONE" >&2; exit 1
else
  [ -n "$ACCEL" ] || { echo "tpu_pod.sh: --accelerator is required to create a slice" >&2; exit 2; }
  run "${CREATE[@]}"
fi

# 2. Copy the code (this checkout, without git data, venvs or caches).
TARBALL=${TMPDIR:-/tmp}/rl_post_code_$NAME.tar.gz
run tar czf "$TARBALL" --exclude-vcs --exclude=.venv --exclude=__pycache__ --exclude=*.egg-info .
run "${GCLOUD[@]}" scp "$TARBALL" "$NAME":rl_post_code.tar.gz "${WHERE[@]}" --worker=all

# 3. Install on every worker.
INSTALL="rm -rf ~/rl_post && mkdir -p ~/rl_post && tar xzf ~/rl_post_code.tar.gz -C ~/rl_post"
INSTALL+=" && cd ~/rl_post && python3 -m venv .venv && .venv/bin/pip install -q -e . '$JAX_TPU'"
run "${GCLOUD[@]}" ssh "$NAME" "${WHERE[@]}" --worker=all --command="$INSTALL"

# 4. Run the entry point on every worker at once; one process per host.
ENTRY=$(printf ' %q' "$@")
RUN_CMD="cd ~/rl_post && RL_POST_CLUSTER=tpu .venv/bin/python$ENTRY --config.distributed.mode=auto"
run "${GCLOUD[@]}" ssh "$NAME" "${WHERE[@]}" --worker=all --command="$RUN_CMD"
