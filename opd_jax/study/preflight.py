"""Before any model loads: config checks, the student's and the teacher's policies, the planned work, and the
preflight of the task (gold answers, context lengths).

Everything here runs in seconds and fails with one clear error naming the field (or question) and the fix, so a
bad config never costs a model load. `plan` is what `--dry_run` prints; `check` is the study's first stage.
"""
from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Mapping

from opd_jax import models
from opd_jax import records
from opd_jax import terminal
from opd_jax.decode import sampling
from opd_jax.models import presets
from opd_jax.models import sharding
from opd_jax.report import common
from opd_jax.report import looks
from opd_jax.report import sequential
from opd_jax.study import model_specs
from opd_jax.study import question_pool
from opd_jax.study import targeted
from opd_jax.teachers import contexts
from opd_jax.teachers import cross_tree
from opd_jax.teachers import cross_view


# ----------------------------------------------------------------------------------------------------------
# Configuration checks and the policies.

_bad = terminal.bad_field       # the ValueError of a bad config field, in `terminal.field_error`'s one-line format


def _positive(config, field: str) -> int:
  section, name = field.split(".")
  value = config[section][name]
  if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
    raise _bad(f"config.{field}", "must be a positive integer", value)
  return value


def _non_finite(tree, prefix: str = "config"):
  """(field, value) of the first float in the config that is NaN or infinite, else None."""
  for k, v in tree.items():
    if isinstance(v, dict):
      found = _non_finite(v, f"{prefix}.{k}")
      if found:
        return found
    elif isinstance(v, float) and not math.isfinite(v):
      return f"{prefix}.{k}", v
  return None


# Integers the config hands to numpy and JAX: a seed becomes a 32-bit PRNG key (jax.random.key: a larger one
# overflows, 2**64 and up, or aliases a smaller seed), every other integer a 32-bit index, count or shape (JAX's
# default integer type: jnp.asarray(2**31) overflows).
SEED_MAX = 2 ** 32 - 1
INT_MAX = 2 ** 31 - 1


# Seeds whose -1 means "config.seed's" (training/loop.py, `training_seed`).
SEEDS_INHERITING = ("config.train.seed",)


def _is_seed(name: str) -> bool:
  return name == "seed" or name.endswith("_seed")


def check_integers(tree, prefix: str = "config") -> None:
  """Every integer of a config (nested groups, tuples such as budget.looks) fits what numpy and JAX take: seeds
  (fields named seed or *_seed) in [0, SEED_MAX], other integers in [-INT_MAX - 1, INT_MAX]; checked before
  anything loads (a 20-digit seed passed every other check, loaded the models and died with an OverflowError).

  Raises:
    ValueError: naming the first field out of range, its range and why (`terminal.field_error`).
  """
  items = tree.items() if hasattr(tree, "items") else enumerate(tree)
  for k, v in items:
    field = f"{prefix}.{k}" if hasattr(tree, "items") else f"{prefix}[{k}]"
    if hasattr(v, "items") or isinstance(v, (list, tuple)):
      check_integers(v, field)
    elif isinstance(v, bool) or not isinstance(v, int):
      continue
    elif _is_seed(str(k)) and not (0 <= v <= SEED_MAX or (v == -1 and field in SEEDS_INHERITING)):
      inherit = " (or -1: config.seed)" if field in SEEDS_INHERITING else ""
      raise _bad(field, f"must be an integer >= 0 and <= 2**32 - 1 = {SEED_MAX}{inherit} (JAX's PRNG keys hold 32 "
                 "bits)", v, fix="pick a smaller seed")
    elif not -INT_MAX - 1 <= v <= INT_MAX:
      raise _bad(field, f"must be an integer of at most 2**31 - 1 = {INT_MAX} in magnitude (numpy and JAX count and "
                 "index with 32-bit integers)", v, fix="pick a smaller value")


def random_seed(spec: str, field: str) -> int | None:
  """The seed of a "random:<seed>" model spec (None for other specs). Raises ValueError naming `field` when it is
  not an integer in [0, SEED_MAX] (the model's PRNG key)."""
  if not spec.startswith("random:"):
    return None
  try:
    seed = int(spec.split(":", 1)[1])
  except ValueError:
    seed = -1
  if not 0 <= seed <= SEED_MAX:
    raise ValueError(f"{field}: a random model spec must be 'random:<seed>' with an integer seed in [0, 2**32 - 1 = "
                     f"{SEED_MAX}] (a 32-bit PRNG key), got {spec!r}; pick a smaller seed")
  return seed


def check_name(name) -> str:
  """config.name as a folder name: the default workdir is runs/<name>, so no path (a '/' or '..' would put it
  elsewhere). Raises ValueError naming the field."""
  if not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in ("/", "\\", os.sep)):
    raise _bad("config.name", "must be a plain folder name (the default workdir is runs/<name>)", name,
               fix="pick a name without '/' or '..', or pass --workdir to choose the directory")
  return name


def _model_specs(config, fields: Mapping[str, str] | None = None) -> dict[str, str]:
  """field -> model spec of the student and of each configuration's external teacher (`fields`: config id ->
  the field that names it, default config.configurations['<id>'])."""
  out = {"config.student.name": config.student.name}
  for cid, spec in sorted(config.configurations.items()):
    teacher = contexts.parse(cid, spec).teacher
    if teacher != contexts.SELF:
      out[(fields or {}).get(cid, f"config.configurations[{cid!r}]")] = teacher
  return out


def chat(config) -> contexts.Chat:
  """The study's chat settings (config.chat), resolved for `contexts.study_chat`."""
  return contexts.Chat(system_prompt=config.chat.system_prompt, kwargs=dict(config.chat.kwargs))


def mesh(config) -> sharding.Mesh:
  """This process's ("data", "model") mesh of config.mesh (`sharding.make_mesh` over the local devices)."""
  return sharding.make_mesh(config.mesh.data, config.mesh.model)


def mesh_rules(config) -> tuple[tuple[str, str | None], ...]:
  """The logical-axis rules of a study: config.mesh.rules (checked: `sharding.check_rules`), or `sharding.RULES`
  when it is empty / absent."""
  return sharding.check_rules(config.mesh.get("rules", ()), "config.mesh.rules") or sharding.RULES


def validate(config) -> None:
  """Config errors that need no model or data (each names the field and the fix: `terminal.field_error`).

  Raises:
    ValueError: naming the first bad field, its allowed values or range and the fix.
  """
  bad = _non_finite(config.to_dict())
  if bad:
    raise _bad(bad[0], "must be a finite number", bad[1])
  check_name(config.name)
  if isinstance(config.seed, bool) or not isinstance(config.seed, int) or config.seed < 0:
    raise _bad("config.seed", "must be an integer >= 0", config.seed)
  check_integers(config.to_dict())
  r = config.report
  if r.target not in common.TARGETS:
    raise _bad("config.report.target", "must be 'incorrect', 'correct', 'all' or 'trained'", r.target,
               choices=common.TARGETS)
  if isinstance(r.pages, bool) or not isinstance(r.pages, int) or r.pages < 0:
    raise _bad("config.report.pages", "must be an integer >= 0", r.pages)
  if r.colour_by not in records.PREDICTORS:
    raise _bad("config.report.colour_by", f"must be one of {records.PREDICTORS}", r.colour_by,
               choices=records.PREDICTORS)
  min_effect = r.get("min_effect", 0.0)
  if isinstance(min_effect, bool) or not isinstance(min_effect, (int, float)) or not (
      math.isfinite(min_effect) and min_effect >= 0):
    raise _bad("config.report.min_effect", "must be a finite number >= 0 (0: not asked)", min_effect)
  estimand = r.get("estimand", "alignment")
  if estimand not in common.ESTIMANDS:
    raise _bad("config.report.estimand", f"must be one of {tuple(common.ESTIMANDS)}", estimand,
               choices=tuple(common.ESTIMANDS))
  if estimand != "alignment" and tuple(config.budget.get("looks", ()) or ()) and not min_effect > 0:
    raise _bad("config.report.min_effect", f"must be > 0 with report.estimand={estimand!r} and budget.looks: the "
               f"equivalence margin is in the {estimand}'s units, not the alignment's default 0.05", min_effect,
               fix="e.g. --config.report.min_effect=0.005")
  if tuple(config.budget.get("looks", ()) or ()) and not min_effect > 0:      # issue 49, item 4: never silently
    raise _bad("config.report.min_effect", "must be > 0 with budget.looks: it is the sequential design's "
               "equivalence margin (a decision 'equivalent' means within it)", min_effect,
               fix=f"e.g. --config.report.min_effect={sequential.MARGIN} (the margin the docs use), or "
               "--config.budget.looks='()' for the fixed design")
  if not isinstance(config.task.get("skip_bad_answers", False), bool):
    raise _bad("config.task.skip_bad_answers", "must be True or False", config.task.skip_bad_answers)
  n = config.task.num_problems
  if isinstance(n, bool) or not isinstance(n, int) or n < 0:
    raise _bad("config.task.num_problems", "must be an integer >= 0 (0: all, or the generator's default)", n)
  for f in ("budget.questions", "budget.rollouts_per_question", "budget.node_rollouts_per_question",
            "budget.nodes_per_rollout", "budget.continuations_per_candidate", "budget.branch_batch",
            "budget.question_batch",
            "sampling.max_new_tokens", "scoring.chunk", "scoring.top_k"):
    _positive(config, f)
  for f in ("budget.student_top_k", "budget.teacher_top_k"):
    if config.budget[f.split(".")[1]] < 0:
      raise _bad(f"config.{f}", "must be >= 0", config.budget[f.split(".")[1]])
  b = config.budget
  if b.node_rollouts_per_question > b.rollouts_per_question:
    raise _bad("config.budget.node_rollouts_per_question",
               f"must be <= config.budget.rollouts_per_question ({b.rollouts_per_question}): node rollouts are "
               "chosen among the base rollouts", b.node_rollouts_per_question,
               fix="lower it, or raise config.budget.rollouts_per_question")
  if b.get("node_group", "balanced") not in NODE_GROUPS:
    raise _bad("config.budget.node_group", f"must be one of {NODE_GROUPS}", b.node_group, choices=NODE_GROUPS,
               fix="the group itself is report.target's: e.g. node_group=target with report.target=incorrect")
  if b.get("node_group", "balanced") == "target" and r.target in common.BOTH_GROUPS:
    raise _bad("config.budget.node_group", f"'target' draws node rollouts from report.target's group only, but "
               f"report.target={r.target!r} reads both groups", "target",
               fix="set budget.node_group='balanced' (the same node rollouts), or report.target='incorrect' or "
               "'correct' (configs/base.py's default target is 'trained')")
  if not isinstance(b.get("adaptive", False), bool):
    raise _bad("config.budget.adaptive", "must be True or False", b.adaptive)
  r_max = b.continuations_max
  if isinstance(r_max, bool) or not isinstance(r_max, int) or r_max < 1:
    raise _bad("config.budget.continuations_max", "must be an integer >= 1 (the most continuations per candidate "
               "of adaptive or weighted allocation; default 64)", r_max)
  how = b.get("allocation", "uniform")
  if how not in ALLOCATIONS:
    raise _bad("config.budget.allocation", f"must be one of {ALLOCATIONS}", how, choices=ALLOCATIONS)
  if b.get("adaptive", False) and how == "weighted":
    raise _bad("config.budget.allocation", "cannot be 'weighted' with budget.adaptive=True", how,
               fix="set budget.adaptive=False, or budget.allocation='adaptive'")
  if how == "weighted":
    minimum = b.get("allocation_minimum", 2)
    if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
      raise _bad("config.budget.allocation_minimum", "must be an integer >= 1 (2 keeps the noise ceiling defined)",
                 minimum)
    if r_max < minimum:
      raise _bad("config.budget.continuations_max", f"must be >= config.budget.allocation_minimum ({minimum}) with "
                 "allocation='weighted'", r_max, fix="raise it (default 64), or lower allocation_minimum")
    if not minimum <= b.continuations_mean <= b.continuations_max:
      raise _bad("config.budget.continuations_mean", f"must lie in [allocation_minimum, continuations_max] = "
                 f"[{minimum}, {b.continuations_max}] with allocation='weighted'", b.continuations_mean)
    min_mass = b.get("allocation_min_mass", 0.01)
    if isinstance(min_mass, bool) or not isinstance(min_mass, (int, float)) or not 0 <= min_mass < 1:
      raise _bad("config.budget.allocation_min_mass", "must be a number in [0, 1) (0: run every candidate)",
                 min_mass)
  if allocation(config) == "adaptive":
    if r_max < b.continuations_per_candidate:
      raise _bad("config.budget.continuations_max", f"must be >= config.budget.continuations_per_candidate "
                 f"({b.continuations_per_candidate}) with adaptive allocation (round 0 runs that many)", r_max,
                 fix="raise it (default 64), or lower continuations_per_candidate")
    if not b.continuations_per_candidate <= b.continuations_mean <= b.continuations_max:
      raise _bad("config.budget.continuations_mean", f"must lie in [continuations_per_candidate, continuations_max] = "
                 f"[{b.continuations_per_candidate}, {b.continuations_max}] with adaptive=True", b.continuations_mean)
    if not b.adaptive_tolerance >= 0:
      raise _bad("config.budget.adaptive_tolerance", "must be >= 0", b.adaptive_tolerance)
  looks.validate(config)
  if not isinstance(b.get("stop_at_answer", False), bool):
    raise _bad("config.budget.stop_at_answer", "must be True or False", b.stop_at_answer)
  if config.budget.node_strategy not in targeted.STRATEGIES:
    raise _bad("config.budget.node_strategy", f"must be one of {targeted.STRATEGIES}", config.budget.node_strategy,
               choices=targeted.STRATEGIES)
  if config.selection not in ("informative", "all"):
    raise _bad("config.selection", "must be 'informative' or 'all'", config.selection,
               choices=("informative", "all"))
  xt = config.scoring.cross_tokenizer
  if xt.mode not in cross_tree.MODES:
    raise _bad("config.scoring.cross_tokenizer.mode", f"must be one of {cross_tree.MODES}", xt.mode,
               choices=cross_tree.MODES)
  if isinstance(xt.prune, bool) or not isinstance(xt.prune, (int, float)) or not xt.prune > 0:
    raise _bad("config.scoring.cross_tokenizer.prune", "must be a number > 0 (nats; inf: no pruning)", xt.prune)
  if isinstance(xt.max_tree_nodes, bool) or not isinstance(xt.max_tree_nodes, int) or xt.max_tree_nodes < 1:
    raise _bad("config.scoring.cross_tokenizer.max_tree_nodes", "must be an integer >= 1", xt.max_tree_nodes)
  if not isinstance(xt.force, bool):
    raise _bad("config.scoring.cross_tokenizer.force", "must be True or False", xt.force)
  if not 0.0 < config.scoring.beta < 1.0:
    raise _bad("config.scoring.beta", "must lie strictly inside (0, 1)", config.scoring.beta)
  policy(config)
  t_q = config.scoring.teacher_temperature
  if not (isinstance(t_q, (int, float)) and math.isfinite(t_q) and t_q >= 0):
    raise _bad("config.scoring.teacher_temperature", "must be a finite number >= 0 (0 = the sampling temperature)",
               t_q)
  _temperature("config.scoring.teacher_temperature", t_q, "the sampling temperature", prob="q")
  mesh_rules(config)
  contexts.check_templates(config.contexts.templates)
  random_seed(config.student.name, "config.student.name")
  for cid, spec in config.configurations.items():
    conf = contexts.parse(cid, spec)
    random_seed(conf.teacher, f"config.configurations[{cid!r}]")
  _check_dtype(config)


def _check_dtype(config) -> None:
  """config.student.dtype: '' or one of models' DTYPES, and no dtype but float32 when a random model runs (those
  are built in float32 whatever the field says: the record would name a dtype the run did not use)."""
  dtype, dtypes = config.student.get("dtype", ""), models.checkpoints.DTYPES
  if dtype not in ("", *dtypes):
    raise _bad("config.student.dtype", f"must be '' (float32 on CPU, bfloat16 on GPU/TPU) or one of {dtypes}",
               dtype, choices=dtypes)
  randoms = [s for s in _model_specs(config).values() if s.startswith("random:")]
  if dtype not in ("", "float32") and randoms:
    raise _bad("config.student.dtype", f"applies to checkpoints only; {randoms[0]!r} runs in float32", dtype,
               fix="leave it '' or 'float32' with random:<seed> models")


ALLOCATIONS = ("uniform", "weighted", "adaptive")
NODE_GROUPS = ("balanced", "target")   # config.budget.node_group (configs/base.py)


def allocation(config) -> str:
  """How targeted continuations are allocated: config.budget.allocation, where budget.adaptive=True (the
  older switch) reads as "adaptive"."""
  b = config.budget
  return "adaptive" if b.get("adaptive", False) else b.get("allocation", "uniform")


# The smallest temperature but 0 (greedy) a study takes: at T < 0.01 a candidate only 1 nat behind the best has
# p = exp(-1 / T) < exp(-100), below float32's smallest normal number (exp(-87.3); accelerators flush smaller ones
# to 0), so every candidate but the best has p = 0: no gradient to align, nothing measured.
MIN_TEMPERATURE = 0.01


def _temperature(field: str, value, zero: str | None, prob: str = "p") -> None:
  """`value` is a finite number >= MIN_TEMPERATURE, or 0 when `zero` says what 0 means (None: 0 refused); else
  ValueError naming `field` (`prob`: the distribution the temperature shapes, p or q)."""
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
      (value == 0 and zero is not None) or (math.isfinite(value) and value >= MIN_TEMPERATURE)):
    why = (f"below {MIN_TEMPERATURE:g} a candidate 1 nat behind the best has {prob} = exp(-1/T) < exp(-100), under "
           f"float32's smallest normal number, so every candidate but one has {prob} = 0 and the study measures "
           "nothing; ")
    if value == 0 and zero is None and not isinstance(value, bool):
      why = (f"0 is greedy decoding: every candidate but one has {prob} = 0 and every rollout of a question is the "
             "same, so no question is informative and there is no gradient to align; ")
    allowed = f"0 ({zero}) or a number >= {MIN_TEMPERATURE:g}" if zero else f"a number >= {MIN_TEMPERATURE:g}"
    raise _bad(field, f"must be {allowed}", value,
               fix=(why if isinstance(value, (int, float)) and 0 <= value < MIN_TEMPERATURE else "")
               + f"use {'0 or ' if zero else ''}a temperature >= {MIN_TEMPERATURE:g} (1.0: the model's own policy)")


def policy(config) -> sampling.SamplingParams:
  """The student's sampled policy: base rollouts and continuations draw from it, and it is the p of every
  estimator (paper.md, "Policy").

  Raises:
    ValueError: naming the config.sampling field and its range: temperature >= MIN_TEMPERATURE (below it,
      greedy 0 included, every candidate but one has p = 0), top_p in (0, 1], top_k an integer >= 0.
  """
  s = config.sampling
  _temperature("config.sampling.temperature", s.temperature, None)
  if isinstance(s.top_p, bool) or not isinstance(s.top_p, (int, float)) or not 0.0 < s.top_p <= 1.0:
    raise _bad("config.sampling.top_p", "must lie in (0, 1] (the nucleus' mass; 1: no truncation)", s.top_p,
               fix="use e.g. 0.95, or 1.0 for none")
  if isinstance(s.top_k, bool) or not isinstance(s.top_k, int) or s.top_k < 0:
    raise _bad("config.sampling.top_k", "must be an integer >= 0 (0: no top-k truncation)", s.top_k)
  return sampling.SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)


def teacher_policy(config) -> sampling.SamplingParams:
  """The scaled teacher q: softmax(z_q / T_q), never truncated. T_q = config.scoring.teacher_temperature, or
  when 0 the sampling temperature (GKD and TRL divide both sides' logits by one temperature), or 1 when
  sampling is greedy (temperature 0)."""
  t_q = config.scoring.teacher_temperature or config.sampling.temperature or 1.0
  return sampling.SamplingParams(temperature=float(t_q))


# ----------------------------------------------------------------------------------------------------------
# The task and the context lengths.

def check_context(config, task, confs, tokenizer, limits: dict[str, int]) -> None:
  """Every question fits the models' contexts: the student prompt + sampling.max_new_tokens in every model's
  (the plain view scores it), and each teacher's context message (+ an incorrect rollout of at most
  max_new_tokens for a context that shows one) + max_new_tokens in that teacher's.

  Args:
    tokenizer: the student's (teachers share it: `environment.setup` checks).
    limits: model spec ("self" = the student) -> its context length (max_seq_len).
  Raises:
    ValueError: naming the question, the lengths and the fields to change.
  """
  c, n_tok = config, config.sampling.max_new_tokens
  chat_settings = chat(config)
  render = lambda m: contexts.study_chat(tokenizer, m, chat_settings)
  fix = "lower config.sampling.max_new_tokens or config.task.num_problems to skip long questions"
  views = sorted({conf.scoring_key for conf in confs})
  for problem in task.problems:
    length, limit = len(render(task.prompt(problem))), min(limits.values())
    if length + n_tok > limit:
      raise ValueError(f"question {problem.id}: prompt of {length} tokens + config.sampling.max_new_tokens={n_tok} "
                       f"exceeds the models' context ({limit} tokens); {fix}")
    for teacher, ctx in views:
      if ctx == "plain":
        continue
      msg = contexts.context_message(ctx, task, problem, incorrect="", templates=c.contexts.templates)
      shows_incorrect = contexts.get(ctx).needs_incorrect
      need = len(render(msg)) + n_tok * (2 if shows_incorrect else 1)
      if need > limits[teacher]:
        raise ValueError(f"question {problem.id}: the {ctx!r} context of teacher {teacher!r} needs up to {need} "
                         f"tokens (message + response{' + an incorrect rollout' if shows_incorrect else ''}), "
                         f"more than its context ({limits[teacher]} tokens); {fix}, or drop that configuration")


def classify_teachers(config) -> None:
  """Find which teachers read text (`cross_view.cross_teacher`) from the checkpoints' headers, for `plan` (the dry run's
  checklist; a run's `check` does it anyway). Errors are left to `check`."""
  student = model_specs.header(config.student.name, config)
  for c in (contexts.parse(k, v) for k, v in config.configurations.items()):
    if c.teacher == contexts.SELF or cross_view.checked(config, c.teacher) or student is None:
      continue
    try:
      h = model_specs.header(c.teacher, config)
      if h is not None:
        cross_view.cross_teacher(config, c.teacher, student[1], h[1], where=c.teacher)
    except (ValueError, OSError):
      pass


def absent(spec: str) -> bool:
  """A model spec whose weights are not on this machine: a path (a folder or a .gguf file) that does not exist, e.g.
  :paper's /data/Qwen3, or a preset whose packages are not installed (`presets.installed`)."""
  if spec in models.PRESETS:
    return not presets.installed(spec)
  return (os.sep in spec or spec.endswith(".gguf")) and not pathlib.Path(spec).expanduser().exists()


_handoff: dict[str, tuple] = {}     # config JSON -> (task, confs) of a check made for a run about to start


def check(config, fields: Mapping[str, str] | None = None, *, hand_off: bool = False, cross_ok: bool = True,
          absent_models_ok: bool = False, local_mesh: bool = True):
  """Everything checkable before any model loads (seconds): config, the mesh (`mesh`), model specs
  (`model_specs.check_model`), task and gold answers, configurations against the task, and the context lengths from
  the checkpoints' headers where they are cheap to read (`models.checkpoints.peek`; otherwise `environment.setup`
  checks them after the load).

  Args:
    fields: config id -> the config field that names the configuration in errors (default
      config.configurations['<id>']; the trainer's is config.train.configuration).
    cross_ok: a teacher of another tokenizer may read text (the study); False: refused (the trainer).
    hand_off: keep the result for the next check of an equal config, which returns it without redoing the work
      (once): `check_train`'s, for the trainer's own `environment.setup`.
    absent_models_ok: a model that is not on this machine (`absent`: a path, or a preset's packages) passes (the
      dry run, which says so: `checklist.describe`); a run refuses it.
    local_mesh: check config.mesh against this process's devices (False: a dry run that prices another machine).
  Returns:
    (task, confs).
  """
  key = json.dumps(config.to_dict(), sort_keys=True, default=str)
  if key in _handoff:
    return _handoff.pop(key)
  validate(config)
  if local_mesh:
    mesh(config)
  for field, spec in _model_specs(config, fields).items():
    random_seed(spec, field)
    if not (absent_models_ok and absent(spec)):
      model_specs.check_model(spec, field)
  task = question_pool.load_task(config, fields)
  confs = contexts.parse_all(dict(config.configurations), has_solutions=task.has_solutions, task_name=task.name,
                             fields=fields)
  specs = {contexts.SELF: config.student.name}
  specs.update({conf.teacher: conf.teacher for conf in confs if conf.teacher != contexts.SELF})
  headers = {name: model_specs.header(spec, config) for name, spec in specs.items()}   # None: absent or not cheap
  student = headers[contexts.SELF]
  for conf in confs:                    # the same tokenizer, or one the cross-tokenizer path reads (`cross_teacher`)
    h = headers.get(conf.teacher)
    if conf.teacher != contexts.SELF and h is not None and student is not None:
      where = (fields or {}).get(conf.config_id, f"config.configurations[{conf.config_id!r}]")
      cross_view.cross_teacher(config, conf.teacher, student[1], h[1], where=f"{where}: teacher {conf.teacher!r}",
                    cross_ok=cross_ok)
  if all(h is not None for h in headers.values()):     # else not cheap: `environment.setup` checks after the load
    check_context(config, task, confs, student[1], {k: v[0] for k, v in headers.items()})
  if hand_off:
    _handoff.clear()
    _handoff[key] = (task, confs)
  return task, confs
