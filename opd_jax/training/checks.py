"""The trainer's checks (`python -m opd_jax.main` runs them before `training.loop.run`, so a bad config loads no
model and writes nothing): `validate_train` (config.train alone), then `check_train` (task, model specs, LoRA
targets against the student's parameter shapes; no weights)."""
import math
import re

from opd_jax import models
from opd_jax import terminal
from opd_jax.study import model_specs
from opd_jax.study import preflight
from opd_jax.training import lora


_bad = terminal.bad_field


def validate_train(config) -> None:
  """config.train.optim errors that need nothing loaded (the optimizer would otherwise take them as they are:
  a negative clip_norm as no clipping, a warmup longer than the run as a learning rate that never peaks), and
  integers out of numpy's and JAX's range (`check_integers`).

  Raises:
    ValueError: naming the field (`terminal.field_error`).
  """
  preflight.check_integers(config.to_dict())
  t, o = config.train, config.train.optim
  is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
  number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
  if not (number(o.learning_rate) and o.learning_rate > 0):
    raise _bad("config.train.optim.learning_rate", "must be a number > 0", o.learning_rate)
  if not (number(o.clip_norm) and o.clip_norm >= 0):
    raise _bad("config.train.optim.clip_norm", "must be a number >= 0 (the global-norm bound; 0: no clipping)",
               o.clip_norm)
  if not (number(o.weight_decay) and o.weight_decay >= 0):
    raise _bad("config.train.optim.weight_decay", "must be a number >= 0", o.weight_decay)
  for f in ("b1", "b2"):
    if not (number(o[f]) and 0 <= o[f] < 1):
      raise _bad(f"config.train.optim.{f}", "must lie in [0, 1)", o[f])
  if o.schedule not in ("constant", "cosine"):
    raise _bad("config.train.optim.schedule", "must be 'constant' or 'cosine'", o.schedule,
               choices=("constant", "cosine"))
  if not (is_int(o.accumulate) and o.accumulate >= 1):
    raise _bad("config.train.optim.accumulate", "must be an integer >= 1 (1: one update per step)", o.accumulate)
  if not (is_int(o.warmup_steps) and o.warmup_steps >= 0):
    raise _bad("config.train.optim.warmup_steps", "must be an integer >= 0", o.warmup_steps)
  if is_int(t.steps) and t.steps > 0:
    updates = -(-t.steps // o.accumulate)
    if o.warmup_steps > updates:
      raise _bad("config.train.optim.warmup_steps",
                 f"must be <= the run's {updates} updates (config.train.steps={t.steps}, optim.accumulate="
                 f"{o.accumulate}): the learning rate would never reach optim.learning_rate", o.warmup_steps,
                 fix="lower it, or raise config.train.steps")


def check_train(config):
  """The trainer's checks that need data but no weights, after `validate_train` and `training.loop.validate`:
  the study checks of its configuration (`check`: model specs, task, contexts; errors name
  config.train.configuration), held-out questions that leave training questions, and LoRA targets matched
  against the student's parameter shapes (`models.decoder.abstract`: shapes only). Returns (task, confs)."""
  t = config.train
  study = config.copy_and_resolve_references()
  with study.unlocked():
    study.configurations = {"train": t.configuration}
  task, confs = preflight.check(study, fields={"train": "config.train.configuration"}, hand_off=True, cross_ok=False)
  pool = len(task.problems)
  if t.eval_questions >= pool:
    raise _bad("config.train.eval_questions", f"must be < the task's pool of {pool} questions (the rest are "
               "trained on)", t.eval_questions, fix="lower it, or raise config.task.num_problems")
  if t.lora.rank > 0:
    _check_lora(config)
  return task, confs


def _check_lora(config) -> None:
  t = config.train
  try:
    re.compile(t.lora.targets)
  except re.error as e:
    raise _bad("config.train.lora.targets", f"must be a regular expression ({e})", t.lora.targets) from None
  cfg = model_specs.model_config(config.student.name, config)
  if cfg is None:
    return
  _, state = models.decoder.abstract(cfg, layered=models.default_layout() == "layered")
  try:
    found = lora.targets(state, t.lora.targets)
  except ValueError:
    paths = sorted(lora.targets(state, r".").keys())
    raise _bad("config.train.lora.targets", "matches no matrix of the student", t.lora.targets,
               fix=f"patterns are searched in param paths such as {paths[:4]}; the default is "
                   f"{lora.DEFAULT_TARGETS!r}") from None
  for path, shape in sorted(found.items()):
    if t.lora.rank > min(shape[-2:]):
      raise _bad("config.train.lora.rank", f"must be <= {min(shape[-2:])}, the smaller side of {path} {shape}",
                 t.lora.rank)
