#!/usr/bin/env bash
# Run a study on this host with all of its local devices (CPU, every visible GPU, or a single-host TPU VM).
#
#   launch/local.sh [CONFIG] [WORKDIR] [--config.field=value ...]
#   launch/local.sh                                               # configs/teacher_sweep.py -> runs/teacher_sweep
#   launch/local.sh configs/smoke.py /tmp/smoke                   # tiny random models, < 1 min on a CPU
#   launch/local.sh configs/teacher_sweep.py runs/ts --config.budget.questions=4
#   DEVICES=0,1 launch/local.sh ...                               # only these GPUs (CUDA_VISIBLE_DEVICES)
#   FAKE_CPU_DEVICES=8 launch/local.sh configs/smoke.py /tmp/s8   # 8 fake CPU devices (exercise the mesh code)
#   DRY_RUN=1 launch/local.sh ...                                 # print the command, run nothing
#
# One process; the study builds its mesh from every device jax sees (config.mesh). Rerunning with the same
# WORKDIR resumes. Environment: PYTHON (default python3), OPD_JAX_CACHE (converted-model cache, default
# ~/.cache/opd_jax), DEVICES, FAKE_CPU_DEVICES, DRY_RUN.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CONFIG=configs/teacher_sweep.py
WORKDIR=
if [[ $# -gt 0 && "$1" != --* ]]; then CONFIG=$1; shift; fi
if [[ $# -gt 0 && "$1" != --* ]]; then WORKDIR=$1; shift; fi
[[ -n "${DEVICES:-}" ]] && export CUDA_VISIBLE_DEVICES="$DEVICES"
if [[ -n "${FAKE_CPU_DEVICES:-}" ]]; then
  export JAX_PLATFORMS=cpu XLA_FLAGS="${XLA_FLAGS:-} --xla_force_host_platform_device_count=$FAKE_CPU_DEVICES"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

cmd=("${PYTHON:-python3}" -m opd_jax.main --config="$CONFIG" ${WORKDIR:+--workdir="$WORKDIR"} "$@")
echo "+ ${cmd[*]}" >&2
[[ -n "${DRY_RUN:-}" ]] && exit 0
exec "${cmd[@]}"
