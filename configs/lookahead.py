"""One-step lookahead on a finished study's nodes (issue 13, experiment 2; opd_jax/validation/lookahead.py).

  python -m opd_jax.main --config=configs/lookahead.py --workdir=/tmp/smoke_la \
      --config.lookahead.study_workdir=/tmp/smoke                        # smoke study: seconds
  python -m opd_jax.main --config=configs/lookahead.py --workdir=runs/sweep_la \
      --config.lookahead.study_workdir=runs/teacher_sweep --config.lookahead.max_nodes=4   # 0.5B: minutes

The student, task, policy, seed and continuation budget are the study's (its config.json); this config holds
only config.lookahead: study_workdir, configurations (config ids; empty: all), max_nodes and rerun_nodes per
configuration (-1: all; re-runs cost |C(u)| x R continuations per node), eta (the step's parameter norm, or the
learning rate with normalize=False), lora.rank (0: every parameter), lora.alpha, lora.targets, seed (LoRA init).
Outputs: <workdir>/lookahead/{nodes.csv,summary.csv,summary.md}. What they show: "gradient check" (the first-order
prediction against the local change with P_succ fixed: confirms the gradient code at a small eta, not training);
re-runs test a predicted change only where they changed a reward and their t interval over the R replicates is
narrower than |predicted| (summary.md counts them); every sign agreement has a Wilson interval and a binomial
p-value against chance (0.5). A test needs a larger eta (e.g. 0.1) and a study with more continuations.
"""
import ml_collections

from configs import base
from opd_jax.training import lora


def get_config(arg: str | None = None):
  config = base.get_config()
  config.name = "lookahead"
  config.job = "lookahead"
  config.lookahead = ml_collections.ConfigDict(dict(
      study_workdir="", configurations=(), max_nodes=-1, rerun_nodes=-1, eta=1e-3, normalize=True, seed=0,
      lora=dict(rank=16, alpha=32.0, targets=lora.DEFAULT_TARGETS)))
  if arg:
    raise ValueError(f"unknown variant {arg!r} of lookahead; use ''")
  return config
