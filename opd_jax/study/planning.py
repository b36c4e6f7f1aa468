"""The plan of a study before any model loads: the work its budget bounds (questions, rollouts, scorings, nodes,
continuations, tokens) and the wall time that work is estimated to take on the 2-core CPU (`plan`, `Plan`), the
dry run's and the checklist's first lines. The cost model (`opd_jax/cost/estimate.py`) prices the same plan on
accelerators.

The project's one wall-time estimate of a study on the CPU is this one (`Plan.total_seconds`, in a phrase
`estimate_text`): the dry run prints it, the console's advice (`larger_advice`) and the docs quote it
(tests/test_docs_figures.py checks the docs against it). What it assumes: `ASSUMPTIONS`."""
from __future__ import annotations

import dataclasses
import importlib

from opd_jax import models
from opd_jax.decode import stops
from opd_jax.report import looks
from opd_jax.study import model_specs
from opd_jax.study import preflight
from opd_jax.teachers import contexts
from opd_jax.teachers import cross_view


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
  other_models: tuple[str, ...] = ()    # checkpoints other than those the rates were measured on (RATES_MEASURED_ON)
  unknown_shapes: tuple[str, ...] = ()  # of those, the ones whose shapes are unknown (`model_specs.architecture`)

  @property
  def total_seconds(self) -> float:
    """The estimated wall time in seconds: the work at the CPU rates, model loading and compiles (cold included)."""
    return self.seconds + self.load_compile_seconds

  def describe(self) -> str:
    when = duration(self.total_seconds)
    return "\n".join([
        f"planned: {_n(self.questions, 'question')}, {_n(self.rollouts, 'base rollout')}, "
        f"{_n(self.scored_rollouts, 'scored rollout')} x {self.scoring_passes} (teacher, context) scorings",
        f"         {_n(self.nodes, 'node')} x <= {self.candidates_per_node} candidates -> <= "
        f"{_n(self.continuations, 'targeted continuation')}",
        f"         <= {self.tokens_generated:,} tokens generated, <= {self.tokens_scored:,} tokens scored",
        *([f"         {self.cross_views} of the scorings read text (teachers of another tokenizer): + <= "
           f"{self.cross_strings:,} strings asked of them, each a few teacher tokens off the cached response "
           "(not in the estimate; benchmarks/cross_cost.py)"] if self.cross_views else []),
        *(f"         {line}" for line in self.design),
        f"         estimated wall time <= {when} ({self.load_compile_seconds / 60:.1f} min of model loading and "
        "compiles" + (f", {self.cold_seconds / 60:.1f} of them reading, assembling and converting models not yet in "
                      "the cache" if self.cold_seconds else "") + ")",
        f"         (the estimate: {ASSUMPTIONS}, at the rates of the 0.5B student and 1.5B teacher; "
        + _other_models(self.other_models, self.unknown_shapes)])


def _other_models(other: tuple[str, ...], unknown: tuple[str, ...]) -> str:
  """The end of the estimate's last line: scale by hardware, or which models differ from the rates' and whether
  --cost_model=cpu can estimate from their shapes (not where a model's shapes are unknown: it would fail)."""
  if not other:
    return "scale by hardware)"
  text = f"this config's models ({', '.join(other)}) differ: "
  if not unknown:
    return text + "--cost_model=cpu estimates the CPU time from their shapes)"
  return text + (f"the shapes of {', '.join(unknown)} are unknown here (no readable header on this machine and not "
                 "in opd_jax/study/model_specs.py ARCHITECTURES), so no estimate from shapes either; add them there "
                 "for --cost_model=cpu)")


def _n(count: int, noun: str) -> str:
  """`count` with thousands separators and `noun` in the plural but for 1: "1 question", "3,360 nodes"."""
  return f"{count:,} {noun}" + ("" if count == 1 else "s")


# What the wall-time estimate assumes: a bound (the planned work is), at the rates below.
ASSUMPTIONS = ("an upper bound on a quiet 2-core CPU, fp32: every question selected, every rollout at its token "
               "cap, every candidate slot filled, the answer stop not counted")


def duration(seconds: float) -> str:
  """A wall time as the dry run prints it: "24.1 min" below 90 minutes, "4.3 h" from 90 minutes on."""
  return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.1f} min"


# Rates of the default study on the 2-core CPU, fp32 (0.5B student, 1.5B teacher), for the dry-run estimate
# only, measured in a cold `configs/teacher_sweep.py` run (manifest timings_s): base rollouts 2 x 32 rows x 256
# token slots in 334 s (49 slots/s); scoring 2 rollouts x 4 (teacher, context) passes of <= 256 response tokens
# in 151 s, compiles included (the contexts' prompts are prefilled too).
DECODE_TOKENS_PER_S = 49.0
RATES_MEASURED_ON = ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")


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


CACHE_STATES = (None, "warm", "cold")


def cold_seconds(spec: str, dtype, cache: str | None = None) -> float:
  """Seconds that reading, assembling and converting the preset `spec` adds to its load when its params for
  `dtype` (None: the platform default) are not in the cache yet; 0 for a converted preset or another spec.
  `cache`: None looks at this machine's cache, "warm" takes every preset as converted, "cold" none."""
  preset = models.checkpoints.PRESETS.get(spec)
  if preset is None or cache == "warm":
    return 0.0
  if cache is None and models.checkpoints.params_dir(preset.sha256, dtype).is_dir():
    return 0.0
  return 2 * HEADER_S + COLD_S_PER_GB * preset.size / 1e9


def plan(config, task=None, cache: str | None = None) -> Plan:
  """The work a config asks for, printed by `--dry_run` and before a run (no model loaded).

  Args:
    task: the study's task when loaded: a pool smaller than config.budget.questions bounds the questions, and the
      answer stop (budget.stop_at_answer) saves work only on a task with an answer tag (`Task.answer_span`).
    cache: which presets count as already converted in the model cache (`cold_seconds`): None as on this
      machine (the dry run's), "warm" every one, "cold" none (a first run on a fresh machine).
  Raises:
    ValueError: an invalid config (`preflight.validate`), or another `cache`.
  """
  if cache not in CACHE_STATES:
    raise ValueError(f"planning.plan: cache must be one of {CACHE_STATES}, got {cache!r}")
  preflight.validate(config)
  b, n_tok = config.budget, config.sampling.max_new_tokens
  confs = [contexts.parse(k, v) for k, v in config.configurations.items()]
  views = {c.scoring_key for c in confs}                 # (teacher, context) pairs: one scoring pass each
  q = b.questions if task is None else min(b.questions, len(task.problems))
  rollouts = -(-q // b.question_batch) * b.question_batch * b.rollouts_per_question   # whole decode batches
  scored = q * (b.rollouts_per_question if config.scoring.all_rollouts else b.node_rollouts_per_question)
  nodes = q * b.node_rollouts_per_question * (n_tok if b.node_strategy == "all" else b.nodes_per_rollout)
  cross = {v for v in views if v[0] != contexts.SELF and cross_view.reads_text(config, v[0])}
  cand = 1 + b.student_top_k + b.teacher_top_k * (len(views) - len(cross))   # text views add no top-k
  per_candidate = b.continuations_per_candidate if preflight.allocation(config) == "uniform" else b.continuations_mean
  cont = int(nodes * cand * per_candidate)
  gen = rollouts * n_tok + cont * n_tok // 2
  scored_tokens = scored * n_tok * len(views)
  secs = gen / DECODE_TOKENS_PER_S + scored_tokens / SCORE_TOKENS_PER_S
  specs = {config.student.name} | {c.teacher for c in confs if c.teacher != contexts.SELF}
  kind = lambda spec: "random" if spec.startswith("random:") else "checkpoint"
  cold = sum(cold_seconds(m, config.student.get("dtype", "") or None, cache) for m in specs)
  fixed = sum(LOAD_S[kind(m)] for m in specs) + 3 * COMPILE_S[kind(config.student.name)] + cold
  strings = len(cross) * (scored * n_tok + nodes * cand)          # every position's token, every candidate
  other = tuple(sorted(m for m in specs if kind(m) == "checkpoint" and m not in RATES_MEASURED_ON))
  return Plan(q, rollouts, scored, len(views), nodes, cand, cont, gen, scored_tokens, secs, fixed, cold,
              len(cross), strings, _design_lines(config, nodes * cand, task), other,
              tuple(m for m in other if model_specs.known_architecture(m, config) is None))


def estimate_text(config, first_use: bool = True) -> str:
  """The dry run's wall-time estimate of `config` in one phrase, as the console's advice and the docs quote it:
  the bound with the models in the cache and, with `first_use` where it differs, on a machine that has not
  converted them yet (`plan` with cache "warm" and "cold"); e.g. "<= 16.9 min with the models in the cache,
  <= 27.5 min converting them first". What it assumes: `ASSUMPTIONS`."""
  warm = plan(config, cache="warm")
  text = f"<= {duration(warm.total_seconds)} with the models in the cache"
  cold = plan(config, cache="cold") if first_use else warm
  if cold.cold_seconds:
    text += f", <= {duration(cold.total_seconds)} converting them first"
  return text


# Configs with a larger variant that would decide what their default leaves undecided: config.name -> (its
# module under configs/, the variant's argument).
LARGER = {"teacher_sweep": ("teacher_sweep", "hour")}


def larger_advice(config_name: str | None) -> str:
  """The console's advice to run the larger variant of config `config_name` (`LARGER`), with its cap and the dry
  run's estimate of its wall time to that cap (`estimate_text`, models in the cache: the default has just
  converted them); "" for a config without one."""
  if config_name not in LARGER:
    return ""
  module, arg = LARGER[config_name]
  config = importlib.import_module(f"configs.{module}").get_config(arg)
  return (f"or configs/{module}.py:{arg} with the same --config.task.exclude (a new study, its looks planned before "
          f"it starts; up to {config.budget.questions} questions: {estimate_text(config, first_use=False)}, its dry "
          "run's bound on a quiet 2-core CPU)")


def _design_lines(config, slots: int, task=None) -> tuple[str, ...]:
  """What the work-saving designs of issue 33 expect to spend, beside the fixed design's bound (Plan.design); the
  answer stop's saving only where the task (when known) has an answer tag."""
  b, out = config.budget, []
  how = preflight.allocation(config)
  if how != "uniform":
    out.append(f"{how} preflight.allocation: {b.continuations_mean:g} continuations per candidate on average "
               "(the fixed "
               f"design's R = {b.continuations_per_candidate}: <= {slots * b.continuations_per_candidate} "
               "continuations)")
  if b.get("stop_at_answer", False) and task is not None and task.answer_span is None:
    out.append(f"config.budget.stop_at_answer saves nothing here: task {task.name!r} has no answer tag to stop at "
               "(continuations run to their stop token or the cap)")
  elif b.get("stop_at_answer", False):
    out.append(f"continuations stop where their answer tag closes: {stops.MEASURED_SAVING:.1%} of continuation "
               "tokens saved on the default study (measured; the estimate above does not count it)")
  if looks.is_sequential(config):
    out.append(looks.expected_text(config))
  return tuple(out)
