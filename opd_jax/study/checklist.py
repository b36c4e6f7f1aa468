"""What a researcher must check before a study runs, printed by `--dry_run` and on stderr before the models load:

  task:     gsm8k: 1319 questions in the pool, 10 studied (selection informative)
  prompt:   'Question: Janet's ducks lay 16 eggs ... Put the final answer inside <answer></answer> tags.' (1st)
  caps:     max_new_tokens=256; contexts: student 32768, qwen2.5-coder-1.5b-instruct 32768 tokens; 1st prompt 98
  budget:   8 rollouts/question (4 with nodes x 3 nodes), <= 8 candidates/node, R = 4 continuations/candidate
  models:   student qwen2.5-coder-0.5b-instruct; teachers self, qwen2.5-coder-1.5b-instruct; dtype float32
  memory:   ~ 8.3 GiB (weights 7.9 GiB + KV cache 0.4 GiB: 64 rows x 354 slots)
  planned:  ... (planning.Plan.describe: work and estimated wall time)

Nothing is loaded but the task (seconds; not even that when it fails: the line says why) and checkpoint headers.
"""
from __future__ import annotations

from typing import Any

from opd_jax import flops
from opd_jax import models
from opd_jax.report import common
from opd_jax.study import model_specs
from opd_jax.study import planning
from opd_jax.study import question_pool
from opd_jax.study import preflight
from opd_jax.teachers import contexts

PROMPT_CHARS = 160                   # the rendered first prompt, clipped in the middle to this many characters
GIB = 2 ** 30


def clip(text: str, n: int = PROMPT_CHARS) -> str:
  """`text` on one line (newlines as \\n), its middle replaced by ' ... ' when longer than n characters: the
  question's start and the template's instruction at the end both show."""
  text = text.replace("\n", "\\n")
  if len(text) <= n:
    return text
  head = (n - 5) // 2
  return text[:head] + " ... " + text[len(text) - (n - 5 - head):]


def size(n: float) -> str:
  """Bytes as GiB (>= 1 GiB) or MiB."""
  return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 2 ** 20:.2f} MiB"


def _dtype(config) -> tuple[str, int]:
  """(what config.student.dtype means here, bytes per element)."""
  dtype = config.student.get("dtype", "")
  if not dtype:
    import jax  # pylint: disable=g-import-not-at-top
    dtype = "float32" if jax.default_backend() == "cpu" else "bfloat16"
    return f"{dtype} (platform default)", 4 if dtype == "float32" else 2
  return dtype, 4 if dtype == "float32" else 2


def describe(config, task: Any = None) -> str:
  """The checklist of `config` (see the module docstring); `task`: the loaded task, else it is loaded here."""
  preflight.classify_teachers(config)
  b, n_tok = config.budget, config.sampling.max_new_tokens
  lines, problem = [], None
  if task is None:
    try:
      task = question_pool.load_task(config)
    except (ValueError, OSError) as e:
      lines.append(f"task:     {config.task.name}: not loaded ({str(e).splitlines()[0][:200]})")
  plan = planning.plan(config, task)
  if task is not None:
    pool = len(task.problems)
    lines.append(f"task:     {task.name}: {pool} questions in the pool, {b.questions} studied (selection "
                 f"{config.selection})" if pool >= b.questions else
                 f"task:     {task.name}: {pool} questions in the pool, fewer than config.budget.questions="
                 f"{b.questions}: at most {pool} studied (selection {config.selection}); to study "
                 f"{b.questions}, give a larger pool (config.task.num_problems, config.task.path)")
    problem = task.problems[0] if pool else None
    if problem is not None:
      lines.append(f"prompt:   '{clip(task.prompt(problem))}' (question 1 of {pool}; config.task.template"
                   f"{' is the task default' if not config.task.template else ''})")
  confs = [contexts.parse(k, v) for k, v in config.configurations.items()]
  teachers = sorted({c.teacher for c in confs})
  specs = {"student": config.student.name, **{t: t for t in teachers if t != contexts.SELF}}
  cfgs, limits, prompt_tokens = {}, [], None
  for who, spec in specs.items():
    arch = model_specs.known_architecture(spec, config)
    if arch is not None:
      cfgs[who] = arch
    limits.append(f"{who} {arch.max_seq_len}" if arch is not None else f"{who} unknown until loaded")
  found = model_specs.header(config.student.name, config) if problem is not None else None   # None: not here
  if found is not None:
    prompt_tokens = len(contexts.study_chat(found[1], task.prompt(problem), preflight.chat(config)))
  lines.append(f"caps:     max_new_tokens={n_tok}; contexts: {', '.join(limits)} tokens"
               + (f"; question 1's prompt {prompt_tokens} tokens" if prompt_tokens is not None else "")
               + (" (truncated responses graded)" if config.task.grade_truncated else ""))
  how = preflight.allocation(config)
  r = {"adaptive": f"R adaptive: {b.continuations_per_candidate} then up to {b.continuations_max} (mean "
                   f"{b.continuations_mean:g})",
       "weighted": f"R weighted by p and q: mean {b.continuations_mean:g}, >= {b.get('allocation_minimum', 2)} per "
                   f"candidate run, <= {b.continuations_max}",
       "uniform": f"R = {b.continuations_per_candidate}"}[how]
  sampled = common.sampled_group(b.get("node_group", "balanced"), config.report.target)
  group = f" {sampled} only" if sampled != "all" else ""
  lines.append(f"budget:   {b.rollouts_per_question} rollouts/question ({b.node_rollouts_per_question}{group} with nodes x "
               f"{b.nodes_per_rollout} nodes, {b.node_strategy}), <= {plan.candidates_per_node} candidates/node, "
               f"{r} continuations/candidate; {len(confs)} configurations")
  dtype, nbytes = _dtype(config)
  absent = [s for s in specs.values() if preflight.absent(s)]   # e.g. :paper's /data/Qwen3, a preset not installed
  named = [s for w, s in specs.items() if s in absent and w in cfgs]          # shapes read from the name
  unknown = [s for w, s in specs.items() if s in absent and w not in cfgs]
  lines.append(f"models:   student {config.student.name}; teachers {', '.join(teachers)}; dtype {dtype}"
               + (f" (not on this machine: {', '.join(absent)};"
                  + (f" shapes from the name: {', '.join(named)};" if named else "")
                  + (f" shapes unknown: {', '.join(unknown)} (no memory line);" if unknown else "")
                  + " a run needs the weights)" if absent else ""))
  lines += [f"weights:  {s} is a preset whose packages are not installed: {models.PRESETS[s].install}"
            for s in absent if s in models.PRESETS]
  if "student" in cfgs:
    weights = sum(flops.matmul_params(c) + (0 if getattr(c, "tie_embeddings", False) else c.d_model * c.vocab_size)
                  for c in cfgs.values()) * nbytes
    s = cfgs["student"]
    rows = max(b.question_batch * b.rollouts_per_question, b.branch_batch)
    slots = (prompt_tokens or 256) + n_tok
    kv = 2 * s.n_layers * rows * slots * s.n_kv_heads * s.head_dim * nbytes
    lines.append(f"memory:   ~ {size(weights + kv)} (weights {size(weights)} + student KV cache {size(kv)}: "
                 f"{rows} rows x {slots} slots; activations and compiles extra)")
  return "\n".join(lines + [plan.describe()])
