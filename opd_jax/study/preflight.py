"""Before any model loads: config checks, the student's and the teacher's policies, the planned work, and the
preflight of the task (gold answers, context lengths).

Everything here runs in seconds and fails with one clear error naming the field (or question) and the fix, so a
bad config never costs a model load. `plan` is what `--dry_run` prints; `check` is the study's first stage.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import struct
from typing import Any, Mapping

from opd_jax.teachers import contexts
from opd_jax.teachers import cross_tree
from opd_jax.teachers import cross_view
from opd_jax.study import looks
from opd_jax import models
from opd_jax.study import records
from opd_jax.decode import sampling
from opd_jax.decode import sharding
from opd_jax import terminal
from opd_jax.decode import stops
from opd_jax.study import targeted
from opd_jax import tasks
from opd_jax.report import decision


# ----------------------------------------------------------------------------------------------------------
# Configuration checks and the policies.

def _bad(field: str, problem: str, value: Any = terminal.UNSET, **kwargs) -> ValueError:
  """The ValueError of a bad config field, in `terminal.field_error`'s one-line format."""
  return ValueError(terminal.field_error(field, problem, value, **kwargs))


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
    elif _is_seed(str(k)) and not 0 <= v <= SEED_MAX:
      raise _bad(field, f"must be an integer >= 0 and <= 2**32 - 1 = {SEED_MAX} (JAX's PRNG keys hold 32 bits)", v,
                 fix="pick a smaller seed")
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
  targets = ("incorrect", "correct", "all")
  if r.target not in targets:
    raise _bad("config.report.target", "must be 'incorrect', 'correct' or 'all'", r.target, choices=targets)
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
  if estimand not in decision.ESTIMANDS:
    raise _bad("config.report.estimand", f"must be one of {tuple(decision.ESTIMANDS)}", estimand,
               choices=tuple(decision.ESTIMANDS))
  if estimand != "alignment" and tuple(config.budget.get("looks", ()) or ()) and not min_effect > 0:
    raise _bad("config.report.min_effect", f"must be > 0 with report.estimand={estimand!r} and budget.looks: the "
               f"equivalence margin is in the {estimand}'s units, not the alignment's default 0.05", min_effect,
               fix="e.g. --config.report.min_effect=0.005")
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
  sharding.rules_from_config(config)
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


@dataclasses.dataclass(frozen=True)
class Plan:
  """Planned work (upper bounds: every question selected, every rollout at the token cap)."""
  questions: int
  rollouts: int
  scored_rollouts: int
  scoring_passes: int
  nodes: int
  candidates_per_node: int
  continuations: int
  tokens_generated: int
  tokens_scored: int
  seconds: float
  load_compile_seconds: float = 0.0     # model loading and compiles, cold_seconds included
  cold_seconds: float = 0.0             # reading, assembling and converting presets not yet in the cache
  cross_views: int = 0                  # views whose teacher reads text (`cross.py`), as far as checked
  cross_strings: int = 0                # their strings asked of the teacher (tail + candidate), at most
  design: tuple[str, ...] = ()          # the work-saving designs' expected work beside the fixed design's bound

  def describe(self) -> str:
    total = self.seconds + self.load_compile_seconds
    when = f"{total / 3600:.1f} h" if total >= 5400 else f"{total / 60:.1f} min"
    return "\n".join([
        f"planned: {self.questions} questions, {self.rollouts} base rollouts, {self.scored_rollouts} scored "
        f"rollouts x {self.scoring_passes} (teacher, context) scorings",
        f"         {self.nodes} nodes x <= {self.candidates_per_node} candidates -> <= {self.continuations} "
        f"targeted continuations",
        f"         <= {self.tokens_generated:,} tokens generated, <= {self.tokens_scored:,} tokens scored",
        *([f"         {self.cross_views} of the scorings read text (teachers of another tokenizer): + <= "
           f"{self.cross_strings:,} strings asked of them, each a few teacher tokens off the cached response "
           "(not in the estimate; benchmarks/cross_cost.py)"] if self.cross_views else []),
        *(f"         {line}" for line in self.design),
        f"         estimated wall time <= {when} (2-core CPU rates of the 0.5B student: "
        f"{self.load_compile_seconds / 60:.1f} min of model loading and compiles"
        + (f", {self.cold_seconds / 60:.1f} of them reading, assembling and converting models not yet in the cache"
           if self.cold_seconds else "") + "; scale by model size and hardware)"])


# Rates of the default study on the 2-core CPU, fp32 (0.5B student, 1.5B teacher), for the dry-run estimate
# only, measured in a cold `configs/teacher_sweep.py` run (manifest timings_s): base rollouts 2 x 32 rows x 256
# token slots in 334 s (49 slots/s); scoring 2 rollouts x 4 (teacher, context) passes of <= 256 response tokens
# in 151 s, compiles included (the contexts' prompts are prefilled too).
DECODE_TOKENS_PER_S = 49.0
SCORE_TOKENS_PER_S = 14.0
# Model loading (a bound of a load from the cache: 51 s measured for the 0.5B's cold load on an idle machine) and
# jit compiles (prefill, decode, branch and one scoring program per (teacher, context); the scoring compiles are
# inside SCORE_TOKENS_PER_S), per checkpoint; random models load and compile in seconds.
LOAD_S = {"checkpoint": 60.0, "random": 2.0}
COMPILE_S = {"checkpoint": 40.0, "random": 4.0}
# A preset not yet converted in the cache (`cold_seconds`) adds: its header read twice (by the checks, then by the
# conversion: HEADER_S each, models/checkpoints.py `_peek_preset_header`), and assembly, hashing and conversion
# at COLD_S_PER_GB of GGUF file, from issue 35's cold run of configs/teacher_sweep.py on a loaded 2-core CPU: ~11
# min before the first bar for the 0.5B and 1.5B presets (1.61 GB), ~68 s of which were header reads.
HEADER_S = 10.0
COLD_S_PER_GB = 370.0


def cold_seconds(spec: str, dtype) -> float:
  """Seconds that reading, assembling and converting the preset `spec` adds to its load when its params for
  `dtype` (None: the platform default) are not in the cache yet; 0 for a converted preset or another spec."""
  preset = models.checkpoints.PRESETS.get(spec)
  if preset is None or models.checkpoints.params_dir(preset.sha256, dtype).is_dir():
    return 0.0
  return 2 * HEADER_S + COLD_S_PER_GB * preset.size / 1e9


def plan(config) -> Plan:
  """The work a config asks for, printed by `--dry_run` and before a run (no model or data loaded)."""
  validate(config)
  b, n_tok = config.budget, config.sampling.max_new_tokens
  confs = [contexts.parse(k, v) for k, v in config.configurations.items()]
  views = {c.scoring_key for c in confs}                 # (teacher, context) pairs: one scoring pass each
  q = b.questions
  rollouts = -(-q // b.question_batch) * b.question_batch * b.rollouts_per_question   # whole decode batches
  scored = q * (b.rollouts_per_question if config.scoring.all_rollouts else b.node_rollouts_per_question)
  nodes = q * b.node_rollouts_per_question * (n_tok if b.node_strategy == "all" else b.nodes_per_rollout)
  cross = {v for v in views if v[0] != contexts.SELF and cross_view.reads_text(config, v[0])}
  cand = 1 + b.student_top_k + b.teacher_top_k * (len(views) - len(cross))   # text views add no top-k
  per_candidate = b.continuations_per_candidate if allocation(config) == "uniform" else b.continuations_mean
  cont = int(nodes * cand * per_candidate)
  gen = rollouts * n_tok + cont * n_tok // 2
  scored_tokens = scored * n_tok * len(views)
  secs = gen / DECODE_TOKENS_PER_S + scored_tokens / SCORE_TOKENS_PER_S
  specs = {config.student.name} | {c.teacher for c in confs if c.teacher != contexts.SELF}
  kind = lambda spec: "random" if spec.startswith("random:") else "checkpoint"
  cold = sum(cold_seconds(m, config.student.get("dtype", "") or None) for m in specs)
  fixed = sum(LOAD_S[kind(m)] for m in specs) + 3 * COMPILE_S[kind(config.student.name)] + cold
  strings = len(cross) * (scored * n_tok + nodes * cand)          # every position's token, every candidate
  return Plan(q, rollouts, scored, len(views), nodes, cand, cont, gen, scored_tokens, secs, fixed, cold,
              len(cross), strings, _design_lines(config, nodes * cand))


def _design_lines(config, slots: int) -> tuple[str, ...]:
  """What the work-saving designs of issue 33 expect to spend, beside the fixed design's bound (Plan.design)."""
  b, out = config.budget, []
  how = allocation(config)
  if how != "uniform":
    out.append(f"{how} allocation: {b.continuations_mean:g} continuations per candidate on average (the fixed "
               f"design's R = {b.continuations_per_candidate}: <= {slots * b.continuations_per_candidate} "
               "continuations)")
  if b.get("stop_at_answer", False):
    out.append(f"continuations stop where their answer tag closes: {stops.MEASURED_SAVING:.1%} of continuation "
               "tokens saved on the default study (measured; the estimate above does not count it)")
  if looks.is_sequential(config):
    out.append(looks.expected_text(config))
  return tuple(out)


# ----------------------------------------------------------------------------------------------------------
# The task and the context lengths.

def load_task(config):
  """The study's task; gold answers that do not grade against themselves are refused (or skipped with a
  warning when config.task.skip_bad_answers: `tasks.check_answers`).

  Raises:
    ValueError / FileNotFoundError: the task's own errors, naming the config.task field where it is known: an
      unknown task or dataset (config.task.name, with the nearest names), an empty data file or a pool of no
      problems (config.task.path / num_problems), more problems asked than the source holds.
  """
  t = config.task
  n = t.num_problems
  try:
    task = tasks.load_task(t.name, path=t.path or None, split=t.split, num_problems=n or None,
                           seed=config.seed, data_dir=t.data_dir or None, download=t.download,
                           template=t.template or None)
  except tasks.EmptyTaskError as e:
    field = "config.task.path" if t.path else "config.task.data_dir" if t.data_dir else "config.task.name"
    raise ValueError(f"{field}: {e.source} is empty: it holds no problems, so config.task.num_problems={n}"
                     f"{' (all)' if not n else ''} gives none; point {field} at a file (or split) with problems"
                     ) from None
  except ValueError as e:            # tasks.base.limit speaks of the API (None = all); the CLI field's 0 is all
    text = str(e)
    if text.startswith("num_problems="):
      text = "config.task." + text.replace("lower num_problems or pass None for all",
                                           "lower config.task.num_problems, or set it to 0 for all of them")
      raise ValueError(text) from None
    if text.startswith(("unknown task", "unknown reasoning-gym dataset")):
      raise ValueError(f"config.task.name: {text}") from None
    raise
  task = tasks.check_answers(task, skip=bool(t.get("skip_bad_answers", False)))
  if not task.problems:
    raise ValueError(f"config.task.num_problems={n}{' (all)' if not n else ''}: task {task.name!r} has no problems "
                     "to study; check config.task.name and its data (config.task.path, split)")
  return _excluded(task, t.get("exclude", ""))


def _excluded(task, path: str):
  """The task without the problems whose question text is listed in the JSON file `path` (config.task.exclude: a
  list of strings, e.g. another job's questions, so that the two share none; "" = keep all).

  Raises:
    ValueError: naming config.task.exclude when the file is missing, not a JSON list of strings, or leaves no problem.
  """
  if not path:
    return task
  try:
    texts = json.loads(pathlib.Path(path).read_text())
  except (OSError, ValueError) as e:
    raise ValueError(f"config.task.exclude={path!r}: cannot read a JSON list of question texts ({e}); give such a "
                     "file or '' to keep every question") from None
  if not isinstance(texts, list) or not all(isinstance(x, str) for x in texts):
    raise ValueError(f"config.task.exclude={path!r}: must hold a JSON list of question texts (strings)")
  drop = set(texts)
  kept = [p for p in task.problems if p.question not in drop]
  if not kept:
    raise ValueError(f"config.task.exclude={path!r} removes all {len(task.problems)} problems of the pool; raise "
                     "config.task.num_problems or exclude fewer")
  return dataclasses.replace(task, problems=kept)


def check_context(config, task, confs, tokenizer, limits: dict[str, int]) -> None:
  """Every question fits the models' contexts: the student prompt + sampling.max_new_tokens in every model's
  (the plain view scores it), and each teacher's context message (+ an incorrect rollout of at most
  max_new_tokens for a context that shows one) + max_new_tokens in that teacher's.

  Args:
    tokenizer: the student's (teachers share it: `study.setup` checks).
    limits: model spec ("self" = the student) -> its context length (max_seq_len).
  Raises:
    ValueError: naming the question, the lengths and the fields to change.
  """
  c, n_tok = config, config.sampling.max_new_tokens
  chat = lambda m: contexts.study_chat(tokenizer, m, c)
  fix = "lower config.sampling.max_new_tokens or config.task.num_problems to skip long questions"
  views = sorted({conf.scoring_key for conf in confs})
  for problem in task.problems:
    length, limit = len(chat(task.prompt(problem))), min(limits.values())
    if length + n_tok > limit:
      raise ValueError(f"question {problem.id}: prompt of {length} tokens + config.sampling.max_new_tokens={n_tok} "
                       f"exceeds the models' context ({limit} tokens); {fix}")
    for teacher, ctx in views:
      if ctx == "plain":
        continue
      msg = contexts.context_message(ctx, task, problem, incorrect="", templates=c.contexts.templates)
      shows_incorrect = contexts.get(ctx).needs_incorrect
      need = len(chat(msg)) + n_tok * (2 if shows_incorrect else 1)
      if need > limits[teacher]:
        raise ValueError(f"question {problem.id}: the {ctx!r} context of teacher {teacher!r} needs up to {need} "
                         f"tokens (message + response{' + an incorrect rollout' if shows_incorrect else ''}), "
                         f"more than its context ({limits[teacher]} tokens); {fix}, or drop that configuration")


def classify_teachers(config) -> None:
  """Find which teachers read text (`cross_view.cross_teacher`) from the checkpoints' headers, for `plan` (the dry run's
  checklist; a run's `check` does it anyway). Errors are left to `check`."""
  student = header(config.student.name, config)
  for c in (contexts.parse(k, v) for k, v in config.configurations.items()):
    if c.teacher == contexts.SELF or cross_view.checked(config, c.teacher) or student is None:
      continue
    try:
      h = header(c.teacher, config)
      if h is not None:
        cross_view.cross_teacher(config, c.teacher, student[1], h[1], where=c.teacher)
    except (ValueError, OSError):
      pass


def header(spec: str, config) -> tuple[int, Any] | None:
  """(context length, tokenizer) of a model spec without its weights: a random:<seed> model's
  (config.random_model.max_seq_len, the byte tokenizer), else the checkpoint's header where it is cheap to read
  (`models.checkpoints.peek`); None otherwise."""
  if spec.startswith("random:"):
    return config.random_model.max_seq_len, models.byte_tokenizer()
  peeked = models.checkpoints.peek(spec)
  return None if peeked is None else (peeked[0].max_seq_len, peeked[1])


_handoff: dict[str, tuple] = {}     # config JSON -> (task, confs) of a check made for a run about to start


def check(config, fields: Mapping[str, str] | None = None, *, hand_off: bool = False, cross_ok: bool = True):
  """Everything checkable before any model loads (seconds): config, model specs (`check_model`), task and gold
  answers, configurations against the task, and the context lengths from the checkpoints' headers where they
  are cheap to read (`models.checkpoints.peek`; otherwise `study.setup` checks them after the load).

  Args:
    fields: config id -> the config field that names the configuration in errors (default
      config.configurations['<id>']; the trainer's is config.train.configuration).
    cross_ok: a teacher of another tokenizer may read text (the study); False: refused (the trainer).
    hand_off: keep the result for the next check of an equal config, which returns it without redoing the work
      (once): `check_train`'s, for the trainer's own `study.setup`.
  Returns:
    (task, confs).
  """
  key = json.dumps(config.to_dict(), sort_keys=True, default=str)
  if key in _handoff:
    return _handoff.pop(key)
  validate(config)
  for field, spec in _model_specs(config, fields).items():
    check_model(spec, field)
  task = load_task(config)
  confs = contexts.parse_all(dict(config.configurations), has_solutions=task.has_solutions, task_name=task.name,
                             fields=fields)
  specs = {contexts.SELF: config.student.name}
  specs.update({conf.teacher: conf.teacher for conf in confs if conf.teacher != contexts.SELF})
  headers = {name: header(spec, config) for name, spec in specs.items()}
  student = headers[contexts.SELF]
  for conf in confs:                    # the same tokenizer, or one the cross-tokenizer path reads (`cross_teacher`)
    h = headers.get(conf.teacher)
    if conf.teacher != contexts.SELF and h is not None and student is not None:
      where = (fields or {}).get(conf.config_id, f"config.configurations[{conf.config_id!r}]")
      cross_view.cross_teacher(config, conf.teacher, student[1], h[1], where=f"{where}: teacher {conf.teacher!r}",
                    cross_ok=cross_ok)
  if all(h is not None for h in headers.values()):     # else not cheap: `study.setup` checks after the load
    check_context(config, task, confs, student[1], {k: v[0] for k, v in headers.items()})
  if hand_off:
    _handoff.clear()
    _handoff[key] = (task, confs)
  return task, confs


# ----------------------------------------------------------------------------------------------------------
# Model specs: what a load would read, checked from names and file headers only.

def check_model(spec: str, field: str) -> None:
  """A model spec names something loadable, checked in milliseconds without weights: "random:<seed>", a preset,
  an HF folder with config.json and valid safetensors headers (`safetensors.safe_open`: header size, offsets
  covering the file, dtypes; every file of the index), or a .gguf file starting with GGUF's magic and version
  ("flax:" specs are imported at load). A typo in a teacher then fails before the student's load (tens of
  seconds for a checkpoint), not after it.

  Raises:
    ValueError / FileNotFoundError: naming `field`, the spec or file and the fix, with the nearest presets or
      paths.
  """
  if spec.startswith("random:"):
    random_seed(spec, field)
    return
  if spec.startswith("flax:") or spec in models.PRESETS:
    return
  path = pathlib.Path(spec).expanduser()
  if path.is_dir():
    _check_hf_folder(path, field)
  elif path.is_file() and path.suffix == ".gguf":
    _check_gguf(path, field)
  elif path.is_file():
    raise _bad(field, "is a file but not a .gguf file", spec,
               fix="pass a .gguf file, an HF folder (config.json + safetensors + tokenizer) or a preset")
  elif os.sep not in spec and not spec.endswith(".gguf"):
    raise _bad(field, "unknown model preset", spec, choices=sorted(models.PRESETS),
               fix=f"known presets: {sorted(models.PRESETS)} (or pass an HF folder or a .gguf path)")
  else:
    parent = path.parent
    near = [str(parent / p.name) for _, p in zip(range(1000), parent.iterdir())] if parent.is_dir() else []
    raise FileNotFoundError(terminal.field_error(field, "model path does not exist", spec, choices=near,
                                               fix="pass an HF folder, a .gguf file or a preset"))


def _check_hf_folder(path: pathlib.Path, field: str) -> None:
  import safetensors  # pylint: disable=g-import-not-at-top
  if not (path / "config.json").is_file():
    raise FileNotFoundError(f"{field}: no config.json in {path}; an HF folder needs config.json, model.safetensors "
                            "(or an index and its shards) and the tokenizer files")
  index = path / "model.safetensors.index.json"
  if index.is_file():
    weight_map = models.checkpoints.read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
      raise ValueError(f"{index}: no 'weight_map' object; re-download the checkpoint's index")
    files = sorted({path / f for f in weight_map.values()})
  elif (path / "model.safetensors").is_file():
    files = [path / "model.safetensors"]
  else:
    raise FileNotFoundError(f"{field}: no model.safetensors or model.safetensors.index.json in {path}; only "
                            "safetensors checkpoints are supported (resave a pytorch_model.bin with save_pretrained)")
  for f in files:
    if not f.is_file():
      raise FileNotFoundError(f"{f}: listed in {index} but missing; re-download the checkpoint")
  for f in files:
    try:
      with safetensors.safe_open(str(f), framework="numpy"):
        pass
    except Exception as e:  # pylint: disable=broad-except  (SafetensorError, OSError, ...)
      raise ValueError(f"{f}: not a valid safetensors file ({e}); re-download or resave it with "
                       "save_pretrained") from None


def _check_gguf(path: pathlib.Path, field: str) -> None:
  """GGUF's header: magic b"GGUF", version 1-3, tensor and key-value counts that fit the file."""
  with open(path, "rb") as f:
    head = f.read(24)
  size = path.stat().st_size
  ok = len(head) == 24 and head[:4] == b"GGUF"
  if ok:
    version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:])
    ok = 1 <= version <= 3 and n_tensors <= size and n_kv <= size
  if not ok:
    raise ValueError(f"{path}: not a valid GGUF file (header {head[:8]!r}; a GGUF file starts with b'GGUF' and "
                     f"version 1-3), named by {field}; the file is damaged or not GGUF: re-download it")


def model_config(spec: str, config) -> models.Config | None:
  """The decoder config of a model spec without weights: a random:<seed> model's (config.random_model, the byte
  tokenizer's vocabulary), else the checkpoint's header where it is cheap (`models.checkpoints.peek`); None
  otherwise."""
  if spec.startswith("random:"):
    r = config.random_model
    return models.Config(arch=r.arch, vocab_size=len(models.byte_tokenizer()), d_model=r.d_model,
                         n_layers=r.n_layers, n_heads=r.n_heads, n_kv_heads=r.n_kv_heads, head_dim=r.head_dim,
                         d_ff=r.d_ff, qkv_bias=r.arch == "qwen2", qk_norm=r.arch == "qwen3",
                         max_seq_len=r.max_seq_len)
  if spec.startswith("flax:"):
    return None
  peeked = models.checkpoints.peek(spec)
  return None if peeked is None else peeked[0]
