"""Accelerator cost model of a study: FLOPs and HBM bytes per stage, roofline times, hours per question.

  python -m opd_jax.main --config=configs/teacher_sweep.py --dry_run --cost_model=cpu
  python -m opd_jax.main --config=configs/teacher_sweep.py:paper --dry_run --cost_model=h200
  python -m opd_jax.main --config=configs/teacher_sweep.py:paper --dry_run --cost_model=v5e-64

Compile only, nothing runs and no weights load: every program of the pipeline is lowered on CPU with the real
shapes from the abstract model (`decoder.abstract`: `nnx.eval_shape`) and XLA's `cost_analysis()` gives its
FLOPs. XLA counts a while / scan body once, so the programs are single steps (one decode step, one scoring
chunk, one prompt-prefill chunk) multiplied by their trip counts here, and every model program is compiled with
1 and with 2 layers in the "layered" layout (a Python loop, no scan): flops(L) = f1 + (L - 1) (f2 - f1), exact
for a stack of identical layers. Bytes: a decode step's (the memory-bound program that dominates) are metered
on its compiled HLO (`hlo_bytes`: every op's operands and outputs, extrapolated over layers the same way; a
branch batch reads its node prefixes once and the suffix slots written so far, `calls`); the other programs'
are analytic: weights once per program call, the KV cache it reads (`flops.decode_bytes_per_step`) and its
[rows, V] fp32 logits.

Work counted (`Work`; upper bounds, as `planning.plan`): every question selected, every base rollout at the
token cap; continuations of n_tok / 2 tokens on average in full `branch_batch` batches (rows that stop leave the
batch: work ~ tokens); prompts and teacher contexts of the lengths measured on the task with the student's
tokenizer (`planned_work`; `PROMPT_TOKENS` and each context's `assumed_tokens` where the tokenizer is not cheap to
read); one student pass per scored rollout serves every (teacher, context) view (`questions.score_views`); the
node heads (`scoring.head_logprobs`, a few rows) are left out. `benchmarks/cost_check.py` fills `Work` from a finished
run's records instead and compares the estimate with the run's stage times.

Times: roofline max(FLOPs / (peak x EFF_FLOPS), bytes / (bandwidth x EFF_BW)) per program call, summed, on the
accelerator's bf16 peak and HBM bandwidth, several chips taken as one ideal device (work and bytes split
evenly, no communication: a lower bound). The CPU estimate uses the fp32 matmul rate that XLA:CPU reaches at the
program's matmul M (rows x tokens; `CPU_MATMUL_GFLOPS`, measured beforehand by `measure_cpu`, not fitted to any
study) and the measured `CPU_BW`.
"""
from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import math
import os
import re

import jax
import jax.numpy as jnp
import numpy as np

from opd_jax import flops
from opd_jax.cost import programs
from opd_jax.decode import sampling
from opd_jax.decode import scoring
from opd_jax.models import decoder
from opd_jax.report import looks
from opd_jax.study import model_specs
from opd_jax.study import planning
from opd_jax.study import preflight
from opd_jax.study import question_pool
from opd_jax.teachers import contexts


@dataclasses.dataclass(frozen=True)
class Accelerator:
  """One chip: dense bf16 peak FLOP/s, HBM bandwidth (bytes/s) and capacity (bytes); `gpu`: JAX preallocates a
  fraction of its memory (XLA_PYTHON_CLIENT_MEM_FRACTION, default 0.75: `usable_bytes`)."""
  name: str
  peak_flops: float
  hbm_bw: float
  hbm_bytes: float
  gpu: bool = False

  def usable_bytes(self) -> float:
    """The memory one chip gives a JAX program: a GPU's XLA_PYTHON_CLIENT_MEM_FRACTION (JAX's GPU memory
    allocation docs: 0.75 by default) of its HBM, a TPU's whole HBM."""
    return self.hbm_bytes * (float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75")) if self.gpu else 1.0)


ACCELERATORS = {
    "h100": Accelerator("H100 SXM (bf16)", 989e12, 3.35e12, 80e9, gpu=True),
    "h200": Accelerator("H200 (bf16)", 989e12, 4.8e12, 141e9, gpu=True),
    "v5e": Accelerator("TPU v5e (bf16)", 197e12, 819e9, 16e9),
    "v5p": Accelerator("TPU v5p (bf16)", 459e12, 2.76e12, 95e9),
}
EFF_FLOPS = 0.5          # assumed fraction of peak FLOP/s reached (prefill, scoring chunks; decode when compute-bound)
EFF_BW = 0.6             # assumed fraction of HBM bandwidth reached (decode steps; any memory-bound program)
# What our programs reached on a real chip (benchmarks/device_check.sh + benchmarks/train_step.py, one H200,
# 2026-11-30, bf16, random Qwen3 weights): scoring MFU 0.20 (0.6B + 1.7B, 8 x 1024 tokens), train step MFU 0.17
# (1.7B LoRA self-teacher, 32 x 2304 tokens) and 0.24 (8B teacher), decode 0.075 of HBM bandwidth (0.6B, batch
# 128). The dry run prints the estimate at these too: the assumed ones are targets, these are today's code.
MEASURED = {"h200": (0.17, 0.075)}   # (fraction of peak FLOP/s, of HBM bandwidth); other chips: not measured

# XLA:CPU fp32 matmul rate (GFLOP/s) of x[M, 896] @ w[896, 4864] (the 0.5B student's MLP), jitted, median of 15,
# and the memory bandwidth of x[1, 8192] @ w[8192, 8192] (bytes of w / time), on the 2-core CPU of the default
# study, measured once beforehand with `measure_cpu()`:
#   PYTHONPATH=. python -c "from opd_jax import costs; print(costs.measure_cpu())"
CPU_MATMUL_GFLOPS = {1: 9.9, 8: 49.0, 32: 82.0, 64: 94.0, 256: 117.0, 1024: 122.0}
CPU_BW = 12.3e9

# Prompt lengths (tokens) assumed where the student's tokenizer is not cheap to read (`planned_work`): the
# gsm_symbolic prompts measure 145 on average, max 181, with the Qwen2.5 chat template; the solution / summary
# contexts add ~130.
PROMPT_TOKENS = 160


def accelerator(name: str) -> tuple[Accelerator | None, int]:
  """`--cost_model` value -> (chip, chips): "h100" | "h200" | "v5e" | "v5p", optionally "-<chips>" (e.g.
  "v5e-64"), or "cpu" (None, 1: the CPU estimate only). Raises ValueError naming the known names."""
  m = re.fullmatch(r"([a-z0-9]+?)(?:-(\d+))?", name.strip().lower())
  if m and m.group(1) == "cpu" and not m.group(2):
    return None, 1
  if not m or m.group(1) not in ACCELERATORS or (m.group(2) and int(m.group(2)) < 1):
    raise ValueError(f"--cost_model={name!r}: unknown accelerator; use cpu or one of {sorted(ACCELERATORS)}, "
                     "optionally with -<chips>, e.g. h200 or v5e-64")
  return ACCELERATORS[m.group(1)], int(m.group(2) or 1)


# ----------------------------------------------------------------------------------------------------------
# Single-step programs and their XLA FLOPs (compile only).


# ----------------------------------------------------------------------------------------------------------
# The study's calls.

@dataclasses.dataclass(frozen=True, kw_only=True)
class Work:
  """What sets a study's shapes and trip counts besides its config: token lengths and counts.

  A None field takes the plan's upper bound (`planning.plan`). `planned_work` measures the prompt lengths on the
  task; `benchmarks/cost_check.py` reads every field from a finished run's records.

  Attributes:
    prompt_tokens: student prompt, chat-rendered (tokens, mean over questions).
    context_tokens: a teacher context's prompt tokens beyond the student's prompt, per context (mean); contexts
      not named take the context's `assumed_tokens` (`contexts.Context`); a context that shows an incorrect
      rollout counts it apart (`incorrect_tokens`).
    incorrect_tokens: the incorrect rollout a `needs_incorrect` context shows (tokens; None: the response cap).
    sampled_questions: questions whose base rollouts were sampled (None: the questions selected, plan.questions).
    continuations: targeted continuations run (None: the plan's bound, every candidate distinct).
    continuation_tokens: mean tokens sampled per continuation (None: half the response cap).
    source: where the lengths come from, for the report.
  """
  prompt_tokens: float = PROMPT_TOKENS
  context_tokens: Mapping[str, float] = dataclasses.field(default_factory=dict)
  incorrect_tokens: float | None = None
  sampled_questions: int | None = None
  continuations: float | None = None
  continuation_tokens: float | None = None
  source: str = f"assumed ({PROMPT_TOKENS}-token prompts, teacher contexts +{contexts.ASSUMED_TOKENS})"

  def extra(self, context: str, n_tok: int) -> float:
    """Tokens a teacher's prompt adds to the student's in `context` (+ the incorrect rollout it may show)."""
    ctx = contexts.get(context)
    out = self.context_tokens.get(context, ctx.assumed_tokens)
    if not ctx.needs_incorrect:
      return out
    return out + (n_tok if self.incorrect_tokens is None else self.incorrect_tokens)


def context_lengths(config, task, problems, tokenizer, names) -> tuple[float, dict[str, float]]:
  """(mean student prompt tokens, {context: mean tokens its teacher prompt adds} for the context `names`) over
  `problems` of `task`, chat-rendered as the study renders them (`contexts.study_chat`; the incorrect rollout a
  context may show left out: `Work.incorrect_tokens`)."""
  chat_settings = preflight.chat(config)
  chat = lambda m: len(contexts.study_chat(tokenizer, m, chat_settings))
  prompts = [chat(task.prompt(p)) for p in problems]
  extra = {c: float(np.mean([chat(contexts.context_message(c, task, p, incorrect="",
                                                           templates=config.contexts.templates)) - n
                             for p, n in zip(problems, prompts)])) for c in sorted(set(names) - {"plain"})}
  return float(np.mean(prompts)), extra


def context_names(config) -> set[str]:
  """The teacher contexts of a study's configurations."""
  return {contexts.parse(k, v).context for k, v in config.configurations.items()}


def planned_work(config, names=None) -> Work:
  """`Work` at the plan's bounds with the prompt and context lengths measured on the task's first 64 questions
  (`context_lengths`; contexts `names`, default the study's `context_names`), or at the assumed lengths (`Work()`)
  where the student's tokenizer is not cheap to read (`model_specs.header`). Loads the task (seconds; raises what
  `question_pool.load_task` raises)."""
  head = model_specs.header(config.student.name, config)
  if head is None:
    return Work()
  tokenizer = head[1]
  task = question_pool.load_task(config)
  problems = task.problems[:64]
  prompt, extra = context_lengths(config, task, problems, tokenizer,
                                  context_names(config) if names is None else names)
  return Work(prompt_tokens=prompt, context_tokens=extra,
              source=f"measured on the task: {prompt:.0f}-token prompts (mean of its first {len(problems)} "
                     "questions), teacher contexts " + ", ".join(f"{c} +{v:.0f}" for c, v in extra.items()))


@dataclasses.dataclass(frozen=True)
class Call:
  """`count` calls of one program in one stage (shapes as `_program`)."""
  stage: str
  kind: str
  model: str
  cfg: decoder.Config
  rows: int
  tokens: int
  slots: int
  count: float
  groups: int = 0      # "decode" of a branch batch: node prefixes of `prefix` slots held once (branching.branch)
  prefix: int = 0
  max_slots: int = 0   # a growing cache's largest size (slots is its mean per step); 0: slots


def calls(config, *, student_passes: str = "once", work: Work | None = None) -> list[Call]:
  """The program calls of a study (see the module docstring for what is counted).

  Args:
    config: a study config (validated by `planning.plan`).
    student_passes: "once" (today: one student pass per scored rollout serves every view) or "per_view" (a
      student pass per (teacher, context) view: the code before the reuse, for comparing older measurements).
    work: token lengths and counts (default `Work()`: assumed prompt lengths, the plan's bounds).
  """
  w = work or Work()
  plan = planning.plan(config)
  b, n_tok, q = config.budget, config.sampling.max_new_tokens, plan.questions
  confs = [contexts.parse(k, v) for k, v in config.configurations.items()]
  keys = sorted({c.scoring_key for c in confs})
  s_cfg = model_specs.architecture(config.student.name, config)
  cfgs = {contexts.SELF: s_cfg, **{t: model_specs.architecture(t, config) for t, _ in keys if t != contexts.SELF}}
  prompt = math.ceil(w.prompt_tokens)
  out = []
  # Base rollouts: per block of question_batch questions, one prefill of the distinct prompts, n_tok steps.
  sampled = plan.questions if w.sampled_questions is None else w.sampled_questions
  blocks = -(-sampled // b.question_batch)
  bucket = sampling.bucket  # pylint: disable=protected-access
  P, rows = bucket(prompt, 16), bucket(b.question_batch * b.rollouts_per_question, 1)
  out.append(Call("rollouts", "prefill", "student", s_cfg, bucket(b.question_batch, 1), P, P + n_tok, blocks))
  # Rows at the cap: a step reads the prompt and the slots written so far (the cache grows, sampling.GROW).
  out.append(Call("rollouts", "decode", "student", s_cfg, rows, 1,
                  min(P + n_tok, P + math.ceil(n_tok / 2 + sampling.GROW / 2)), blocks * n_tok, max_slots=P + n_tok))
  # Scoring: per question, batches of <= 8 scored rollouts; per view the teacher's prompt prefill and chunks.
  per_q = plan.scored_rollouts // q
  sb = min(scoring._bucket(per_q, 1), 8)  # pylint: disable=protected-access
  batches = q * -(-per_q // 8)
  T = scoring._bucket(n_tok, 16)  # pylint: disable=protected-access
  C = min(config.scoring.chunk, T)
  T_pad = -(-T // C) * C
  chunks = T_pad // C

  def side(stage, name, cfg, prompt_tokens, distinct=1):
    # Each distinct prompt of a batch is prefilled once (scoring.score): the question's rollouts share the
    # student's prompt and a context, except a context that shows an incorrect rollout (2: the first incorrect
    # rollout's text, or for that rollout itself the next one's).
    c, width = scoring.prompt_chunks(scoring.prompt_width(math.ceil(prompt_tokens)) - 1, config.scoring.chunk)
    return [Call(stage, "prompt", name, cfg, min(distinct, sb), c, width + T_pad, batches * width // c),
            Call(stage, "chunk", name, cfg, sb, C, width + T_pad, batches * chunks)]

  for i, (teacher, ctx) in enumerate(keys):
    identical = teacher == contexts.SELF and ctx == "plain"
    if i == 0 or student_passes == "per_view":
      out += side("scoring", "student", s_cfg, prompt)
    else:
      out.append(Call("scoring", "head", "student", s_cfg, sb, C, 0, batches * chunks))
    if not identical:
      extra = w.extra(ctx, n_tok)
      out += side("scoring", f"{'student' if teacher == contexts.SELF else teacher} ({ctx})", cfgs[teacher],
                  prompt + extra, 2 if contexts.get(ctx).needs_incorrect else 1)
    out.append(Call("scoring", "predictors", "-", s_cfg, sb, C, 0, batches * chunks))
  # Continuations: one prefill of the node rollouts per question, then full branch batches (one start step each).
  seq = bucket(prompt + n_tok, 16)
  nb = b.branch_batch
  conts = plan.continuations if w.continuations is None else w.continuations
  tokens = n_tok / 2 if w.continuation_tokens is None else w.continuation_tokens
  n_calls = q * -(-(conts // q) // nb)
  # A batch of nb branches holds each of its nodes' prefixes once: the nodes' branches are consecutive, so a
  # batch spans about nb / (branches per node) + 1 nodes (branching.branch rounds it up to a power of two).
  groups = bucket(min(nb, -(-nb * plan.nodes // max(conts, 1)) + 1), 1)
  # A step reads the suffix slots written so far (sampling.decode_compacting grows the cache by GROW slots):
  # with lengths uniform up to the cap (mean `tokens`), a generated token's step reads 2/3 x tokens slots on
  # average (sum of L^2 / 2 over sum of L), + GROW / 2 of rounding. The prefix window is the longest node
  # prefix of the batch rounded up to a power of two (branching.branch); nodes sit early in their rollouts
  # (exponential positions): a quarter of the cap is taken as the typical node position.
  suffix = min(n_tok + 1, math.ceil(2 * tokens / 3 + sampling.GROW / 2))
  window = min(seq, max(sampling.GROW, bucket(math.ceil(prompt + n_tok / 4), 1)))
  out.append(Call("continuations", "prefill", "student", s_cfg, b.node_rollouts_per_question, seq, seq, q))
  out.append(Call("continuations", "decode", "student", s_cfg, nb, 1, suffix, n_calls + conts * tokens / nb,
                  groups=groups, prefix=window, max_slots=n_tok + 1))
  return out


def cpu_rate(m: int) -> float:
  """fp32 matmul FLOP/s of XLA:CPU at matmul M (`CPU_MATMUL_GFLOPS`, log-linear between measured M)."""
  ms = sorted(CPU_MATMUL_GFLOPS)
  return 1e9 * float(np.interp(math.log(max(m, 1)), [math.log(x) for x in ms], [CPU_MATMUL_GFLOPS[x] for x in ms]))


@dataclasses.dataclass(frozen=True)
class Cost:
  """Totals of a set of calls: FLOPs, HBM bytes, CPU seconds, accelerator roofline seconds and the part of
  those that is compute-bound."""
  flops: float
  bytes: float
  cpu_s: float
  cpu_compute_s: float
  acc_s: float
  acc_compute_s: float

  def bound(self, on_cpu: bool = False) -> str:
    """"compute" when compute-bound programs take most of the time, else "memory"."""
    t, tc = (self.cpu_s, self.cpu_compute_s) if on_cpu else (self.acc_s, self.acc_compute_s)
    return "compute" if tc >= t / 2 else "memory"


def cost(cs: list[Call], chip: Accelerator | None, chips: int = 1, cpu_bytes_per_el: int = 4, *,
         eff: tuple[float, float] = (EFF_FLOPS, EFF_BW)) -> Cost:
  """Sum over calls of XLA FLOPs, analytic bytes (bf16 weights and KV on the accelerator; fp32 for the CPU
  estimate) and roofline times (module docstring) at `eff` = (fraction of peak FLOP/s, of HBM bandwidth)."""
  programs.compile_all(cs)
  f = by = cpu = cpu_c = acc = acc_c = 0.0
  for c in cs:
    fl = programs.program_flops(c.kind, c.cfg, c.rows, c.tokens, c.slots, c.groups, c.prefix)
    t_c = fl / cpu_rate(c.rows * c.tokens)
    t = max(t_c, programs.program_bytes(c.kind, c.cfg, c.rows, c.tokens, c.slots, cpu_bytes_per_el, c.groups, c.prefix)
            / CPU_BW)
    cpu, cpu_c = cpu + c.count * t, cpu_c + (c.count * t if t_c >= t else 0.0)
    bts = programs.program_bytes(c.kind, c.cfg, c.rows, c.tokens, c.slots, 2 if chip else cpu_bytes_per_el, c.groups,
                        c.prefix)
    f, by = f + c.count * fl, by + c.count * bts
    if chip:
      t_c = fl / (chips * chip.peak_flops * eff[0])
      t = max(t_c, bts / (chips * chip.hbm_bw * eff[1]))
      acc, acc_c = acc + c.count * t, acc_c + (c.count * t if t_c >= t else 0.0)
  return Cost(f, by, cpu, cpu_c, acc, acc_c)


STAGES = ("rollouts", "scoring", "continuations")


def describe(config, name: str, variance_split: str | None = None) -> str:
  """The `--dry_run --cost_model=<name>` report: per stage FLOPs, bytes, the CPU estimate and (for an
  accelerator) the roofline time and its bound, then totals and hours per question; with `variance_split` (a JSON
  of benchmarks/variance_split.py, else config.budget.pilot) also the cheapest design for the fixed design's precision
  (cost/design.py).
  Raises ValueError on an unknown accelerator, a model without an architecture or an unreadable split."""
  chip, chips = accelerator(name)
  work = planned_work(config)
  cs = calls(config, work=work)
  plan = planning.plan(config)
  where = "cpu" if chip is None else f"{chips} x {chip.name}"
  head = ["stage", "FLOPs", "bytes", "CPU est", "bound"] if chip is None else [
      "stage", "FLOPs", "HBM bytes", "CPU est", f"roofline ({name})", "bound"]
  rows, total = [], []
  for stage in STAGES + ("total",):
    c = cost([x for x in cs if stage in ("total", x.stage)], chip, chips)
    row = [stage, f"{c.flops:.3g}", f"{c.bytes:.3g}", _secs(c.cpu_s)]
    row += [_secs(c.acc_s), c.bound()] if chip else [c.bound(on_cpu=True)]
    rows.append(row)
    total = c
  widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
  fmt = lambda r: "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()
  lines = [f"cost model ({where}; compile-only XLA FLOPs, decode bytes metered on the compiled HLO, other bytes "
           "analytic; upper bounds of planning.plan):"]
  lines += [fmt(head)] + [fmt(r) for r in rows]
  cheap = cost([x for x in cs if x.stage != "continuations"], chip, chips)
  lines.append(f"  without the targeted continuations (what the report's cheap proxies need: rollouts and scoring): "
               f"CPU est {_secs(cheap.cpu_s)} ({cheap.cpu_s / total.cpu_s:.0%} of the total)"
               + (f", roofline {_secs(cheap.acc_s)} ({cheap.acc_s / total.acc_s:.0%})" if chip else ""))
  lines.append(f"  CPU estimate, from the models' shapes (the plan's wall time above is at the measured rates of "
               f"the 0.5B student and 1.5B teacher): fp32 matmul rate at each program's M from CPU_MATMUL_GFLOPS "
               f"({min(CPU_MATMUL_GFLOPS.values()):.0f}-{max(CPU_MATMUL_GFLOPS.values()):.0f} GFLOP/s), "
               f"{CPU_BW / 1e9:.1f} GB/s; compile and load excluded")
  if chip:
    lines.append(f"  roofline: {chips} x ({chip.peak_flops / 1e12:.0f} TFLOP/s bf16 at {EFF_FLOPS:.0%}, "
                 f"{chip.hbm_bw / 1e12:.2f} TB/s HBM at {EFF_BW:.0%}), bf16 weights and KV cache, chips as one "
                 "ideal device (no communication)")
    lines.append(f"  hours per question: {total.acc_s / plan.questions / 3600:.3g} on {where} "
                 f"({total.acc_s / 3600:.3g} h for {plan.questions} questions)")
    lines += _design_hours(config, work, total.acc_s / plan.questions / 3600, chip, chips, where)
    pilot = variance_split or config.budget.get("pilot", "")
    if pilot:
      from opd_jax.cost import design  # pylint: disable=g-import-not-at-top
      lines += design.describe(config, work, chip, chips, pilot,
                               "--variance_split" if variance_split else "config.budget.pilot")
    else:
      lines.append(f"  hours for R={config.budget.continuations_per_candidate}'s precision: needs a measured "
                   "variance split (--variance_split=<JSON of benchmarks/variance_split.py on a pilot study>)")
    lines.append(measured_line(cs, name, chip, chips, per=plan.questions))
    lines.append(memory_line(_peak_bytes(cs, 2), chip, chips, where))
  lines.append(f"  lengths {work.source}; a context showing an incorrect rollout also + the response cap; "
               "continuations average half the "
               "cap in full batches, each step reading the suffix written so far (2/3 of the mean length)")
  return "\n".join(lines)


def _design_hours(config, work: Work, per_q: float, chip, chips: int, where: str) -> list[str]:
  """The fixed design's hours per question beside the configured design's (issue 33, item 5): continuations at
  the design's count (planning.plan), and for a sequential study the questions it is expected to run, from the
  verdict's calibration (looks.MEASURED_STOP), per question of the cap. [] for the fixed design."""
  if preflight.allocation(config) == "uniform" and not looks.is_sequential(config):
    return []
  fixed = config.copy_and_resolve_references()
  fixed.budget.allocation, fixed.budget.adaptive, fixed.budget.looks = "uniform", False, ()
  fixed.budget.futility = 0.0
  bound = cost(calls(fixed, work=work), chip, chips).acc_s / planning.plan(fixed).questions / 3600
  out = [f"  without looks (uniform R = {config.budget.continuations_per_candidate}, every question): {bound:.3g} h "
         f"per question on {where}; this design: {per_q:.3g} h per question run"]
  if looks.is_sequential(config):
    lo, hi = looks.MEASURED_STOP[0.5][0], looks.MEASURED_STOP[0.0][1]
    out.append(f"  sequential: {lo * per_q:.3g}-{hi * per_q:.3g} h per question of the cap on the expected work "
               f"(it stopped at {lo:.2f}-{hi:.2f} of the cap in the verdict's calibration: looks.MEASURED_STOP)")
    f = looks.design(config).futility
    if f in looks.MEASURED_FUTILE:
      flo, fhi = looks.MEASURED_FUTILE[f]
      out.append(f"  futility {f:g}: {flo * per_q:.3g}-{fhi * per_q:.3g} h per question of the cap where the cap "
                 f"cannot decide (it stopped at {flo:.2f}-{fhi:.2f} of the cap there: looks.MEASURED_FUTILE)")
  return out


def measured_line(cs: list[Call], name: str, chip: Accelerator, chips: int, per: int = 0) -> str:
  """The total at the efficiencies MEASURED on that chip (or a note that none were)."""
  kind = name.split("-")[0]
  if kind not in MEASURED:
    return f"  no measured efficiencies for {kind} (costs.MEASURED): the roofline above is the only estimate"
  f_eff, b_eff = MEASURED[kind]
  h = cost(cs, chip, chips, eff=MEASURED[kind]).acc_s / 3600
  fmt = lambda x: f"{x:.3g}" if x < 1000 else f"{x:,.0f}"
  each = f" ({fmt(h / per)} h per question)" if per else ""
  return (f"  at today's measured efficiencies ({f_eff:.0%} of peak FLOP/s, {b_eff:.1%} of HBM bandwidth; "
          f"costs.MEASURED): {fmt(h)} h{each}")


def memory_line(need: float, chip: Accelerator, chips: int, where: str) -> str:
  """The dry run's line on whether `need` bytes (weights + the largest KV cache, bf16: `_peak_bytes`) fit `chips`
  chips' usable memory (`Accelerator.usable_bytes`): a WARNING naming the fix when they do not."""
  usable = chips * chip.usable_bytes()
  share = f"{usable / 1e9:.0f} GB usable of {chips} x {chip.hbm_bytes / 1e9:.0f} GB" + (
      " (XLA_PYTHON_CLIENT_MEM_FRACTION)" if chip.gpu else "")
  if need > usable:
    return (f"  WARNING: weights + the largest KV cache need {need / 1e9:.0f} GB in bf16, more than {share}: lower "
            "config.budget.branch_batch / question_batch or add chips")
  return (f"  memory on {where}: weights + the largest KV cache {need / 1e9:.0f} GB in bf16 of {share} (the memory "
          "line above is at this machine's dtype); activations and compiles extra")


def _peak_bytes(cs: list[Call], bytes_per_el: int) -> float:
  weights = sum(flops.matmul_params(c) * bytes_per_el for c in {c.cfg for c in cs})
  kv = max(2 * c.cfg.n_layers * (c.rows * (c.max_slots or c.slots) + c.groups * c.prefix) * c.cfg.n_kv_heads
           * c.cfg.head_dim * bytes_per_el for c in cs)
  return weights + kv


def _secs(s: float) -> str:
  return f"{s:.3g} s" if s < 3600 else f"{s / 3600:.3g} h"


def measure_cpu(reps: int = 15) -> dict:
  """The microbenchmark behind CPU_MATMUL_GFLOPS and CPU_BW (median of `reps` timed calls each)."""
  import statistics  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top

  def run(m, k, n):
    x, w = jnp.ones((m, k), jnp.float32), jnp.full((k, n), 0.01, jnp.float32)
    f = jax.jit(jnp.matmul)
    f(x, w).block_until_ready()
    ts = []
    for _ in range(reps):
      t = time.perf_counter()
      f(x, w).block_until_ready()
      ts.append(time.perf_counter() - t)
    return statistics.median(ts)

  out = {m: round(2 * m * 896 * 4864 / run(m, 896, 4864) / 1e9, 1) for m in CPU_MATMUL_GFLOPS}
  out["bw_gb_s"] = round(8192 * 8192 * 4 / run(1, 8192, 8192) / 1e9, 1)
  return out
