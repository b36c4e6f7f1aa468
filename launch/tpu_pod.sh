#!/usr/bin/env bash
# Run a study on every host of a Cloud TPU pod slice (one process per host, jax.distributed over the slice).
#
#   launch/tpu_pod.sh NAME ZONE CONFIG WORKDIR [--config.field=value ...]
#   SYNC=1 SETUP=1 launch/tpu_pod.sh my-v5e-32 us-west4-a configs/teacher_sweep.py:paper /mnt/shared/runs/ts \
#       --config.student.name=/mnt/shared/models/Qwen3-1.7B
#   DRY_RUN=1 launch/tpu_pod.sh ...         # print the gcloud commands, run nothing
#
# Runs, on all workers at once (gcloud compute tpus tpu-vm ssh NAME --zone ZONE --worker=all):
#   cd $REPO_DIR && OPD_JAX_CACHE=$CACHE python3 -m opd_jax.main --config=CONFIG --workdir=WORKDIR --multihost ...
# --multihost makes main.py call jax.distributed.initialize(), which finds the slice's coordinator, process count
# and index from the TPU VM metadata. Questions are split between the processes; each writes its own record parts.
# WORKDIR must be one directory every host can write: an NFS / Filestore mount or a gcsfuse-mounted bucket
# (records are written with local file APIs, so gs:// URLs are not opened directly). Rebuild the summary from
# all parts afterwards with `python -m opd_jax.report --workdir=WORKDIR`. Model paths (HF folders) must exist on
# every host too; presets are installed per host by `pip install -e '.[demo]'` (SETUP=1 installs the package).
#
# Environment: PROJECT (gcloud --project), REPO_DIR (checkout on the workers, default ~/opd_jax),
# CACHE (per-host converted-model cache, default /tmp/opd_jax_cache: keep it local, it takes file locks),
# SYNC=1 (first copy this checkout to REPO_DIR on every worker with tpu-vm scp), SETUP=1 (pip install -e . first),
# PYTHON (remote interpreter, default python3), DRY_RUN=1.
set -euo pipefail
if [[ $# -lt 4 ]]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
NAME=$1 ZONE=$2 CONFIG=$3 WORKDIR=$4
shift 4
REPO_DIR="${REPO_DIR:-~/opd_jax}"
CACHE="${CACHE:-/tmp/opd_jax_cache}"
PY="${PYTHON:-python3}"
GCLOUD=(gcloud compute tpus tpu-vm)
TARGET=(--zone "$ZONE" --worker=all ${PROJECT:+--project "$PROJECT"})

overrides=""
for a in "$@"; do overrides+=" $(printf '%q' "$a")"; done
remote="cd $REPO_DIR"
[[ -n "${SETUP:-}" ]] && remote+=" && $PY -m pip install -q -e ."
remote+=" && OPD_JAX_CACHE=$(printf '%q' "$CACHE") $PY -m opd_jax.main --config=$(printf '%q' "$CONFIG")"
remote+=" --workdir=$(printf '%q' "$WORKDIR") --multihost$overrides"

run() { echo "+ $*" >&2; [[ -n "${DRY_RUN:-}" ]] || "$@"; }
if [[ -n "${SYNC:-}" ]]; then
  src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  run "${GCLOUD[@]}" ssh "$NAME" "${TARGET[@]}" --command "mkdir -p $REPO_DIR"
  run "${GCLOUD[@]}" scp --recurse "$src/opd_jax" "$src/configs" "$src/setup.py" "$NAME:$REPO_DIR/" "${TARGET[@]}"
fi
run "${GCLOUD[@]}" ssh "$NAME" "${TARGET[@]}" --command "$remote"
