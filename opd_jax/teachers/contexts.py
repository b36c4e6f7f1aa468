"""Teacher configurations: (teacher model, context, divergence), written `teacher:context:divergence[@x]`.

paper.md, "Objects" and "Self-distillation contexts". The teacher reads the student's own response token ids
verbatim after its own context (never decoded and re-tokenized), so response position t scores the same
token id on both sides. Every context is a user message rendered with the student's chat template and flags.

  self:solution:reverse_kl                         the student, given a reference solution, reverse KL
  qwen2.5-coder-1.5b-instruct:plain:jsd@0.5        an external teacher, the plain question, JSD_beta=0.5
  self:plain:clipped_reverse_kl@0.5                the student itself (q = p), clip 0.5
  self:solution:topk_reverse_kl@8                  reverse KL over the student's top-8 candidates

Divergence names and their '@' parameters are the registry's (opd_jax/estimators/divergences.py, `divergences.parse`).
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Callable, Mapping, Sequence

from opd_jax import models
from opd_jax import terminal
from opd_jax.estimators import divergences
from opd_jax.tasks import base as task_base

SELF = "self"
ASSUMED_TOKENS = 128      # tokens a context adds to the prompt, assumed where they are not measured (cost model)
FIELDS = ("prompt", "solution", "answer", "incorrect", "summary")   # placeholders `context_message` fills itself
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Context:
  """One self-distillation context: what the teacher reads before the student's response (paper.md,
  "Self-distillation contexts"). The one place a context is described; every stage asks it, never its name.

  Attributes:
    name: the `context` of a `teacher:context:divergence` spec.
    template: the teacher's user message [ours; config.contexts.templates overrides it]: `{prompt}` is the
      student's own user message (task template applied), the other placeholders are filled per question
      ({solution}, {summary}, {answer}) and per rollout ({incorrect}).
    fills: the placeholders the context fills: names of FIELDS or of `values`. A template (registered or
      `config.contexts.templates`) with any other placeholder is refused, when the entry is made
      (`__post_init__`) or at preflight (`check_templates`), naming the context and the placeholder.
    needs_solution: the task must carry reference solutions (refused otherwise, before any model loads).
    needs_incorrect: shows another rollout of the question graded wrong ({incorrect}); unavailable for a rollout
      without one (`incorrect_source`), and its teacher prompt grows by that rollout (the cost model).
    assumed_tokens: tokens the context adds to the student's prompt where the tokenizer is not read (the cost
      model's `planned_work` measures them on the task otherwise), the incorrect rollout not counted.
    values: a new placeholder's value, name -> fn(task, problem) -> str (e.g. {"first_step": lambda task,
      problem: problem.solution.splitlines()[0]}); list the name in `fills` too. May replace one of FIELDS.
  """
  name: str
  template: str
  fills: tuple[str, ...] = ("prompt", "solution", "answer")
  needs_solution: bool = False
  needs_incorrect: bool = False
  assumed_tokens: int = ASSUMED_TOKENS
  values: Mapping[str, Callable] = dataclasses.field(default_factory=dict, hash=False)

  def __post_init__(self):
    named = ", ".join("{" + f + "}" for f in self.fills)
    for name in self.fills:
      if name not in FIELDS and name not in self.values:
        raise ValueError(f"context {self.name!r} fills {{{name}}}, which nothing computes: give the entry "
                         f"values={{{name!r}: fn(task, problem) -> str}} (built in: {', '.join(FIELDS)})")
    for name in _PLACEHOLDER.findall(self.template):
      if name not in self.fills:
        raise ValueError(f"context {self.name!r}: its template has the placeholder {{{name}}}, which the context "
                         f"does not fill (it fills {named}), so the teacher would read '{{{name}}}' verbatim; add "
                         f"{name!r} to fills and, unless it is one of {FIELDS}, its value to values "
                         "(docs/usage.md, \"A context\")")


_SOLUTION = "{prompt}\n\nHere is a reference solution:\n{solution}\n\nUsing it as a guide, solve the problem yourself."
# Registered contexts, by name. A fork adds one `Context(...)` here (docs/usage.md, "Extending"); the registry
# test (tests/test_registries.py) runs every entry through the smoke study.
REGISTRY: dict[str, Context] = {c.name: c for c in (
    Context(name="plain", template="{prompt}", assumed_tokens=0),
    Context(name="solution", template=_SOLUTION, needs_solution=True),
    Context(name="summary", template=("{prompt}\n\nThe key equations of a reference solution, in order:\n{summary}\n\n"
                                      "Using them as a guide, solve the problem yourself."),
            fills=("prompt", "solution", "answer", "summary"), needs_solution=True),
    Context(name="answer", template="{prompt}\n\nThe correct final answer is {answer}. Solve the problem yourself.",
            assumed_tokens=16),
    Context(name="contrastive",
            template=("{prompt}\n\nHere is a reference solution:\n{solution}\n\n"
                      "Here is an INCORRECT attempt; do not repeat its mistakes:\n{incorrect}\n\n"
                      "Using the reference solution as a guide, solve the problem yourself."),
            fills=("prompt", "solution", "answer", "incorrect"), needs_solution=True, needs_incorrect=True),
    # A wrong attempt shown as if it were the reference solution: a control whose sign is known in advance (it
    # should hurt: docs/results.md, "The validation experiment", issue 36).
    Context(name="misleading",
            template="{prompt}\n\nHere is a reference solution:\n{incorrect}\n\n"
                     "Using it as a guide, solve the problem yourself.",
            fills=("prompt", "solution", "answer", "incorrect"), needs_incorrect=True),
)}


def get(name: str, field: str = "config.configurations") -> Context:
  """The registered context `name`.

  Raises:
    ValueError: one line naming `field`, the nearest registered names and all of them.
  """
  if name not in REGISTRY:
    raise ValueError(terminal.field_error(field, f"unknown context {name!r}", choices=tuple(REGISTRY), near=name,
                                          fix=f"use one of {tuple(REGISTRY)}"))
  return REGISTRY[name]


def check_templates(templates: Mapping[str, str], field: str = "config.contexts.templates") -> None:
  """Refuse a context template the teacher would get with a placeholder left in it: a context name that is not
  registered (`REGISTRY`), a value that is not a string, or a `{name}` that its context does not fill
  (`Context.fills`); literal braces such as `\\boxed{}` pass.

  Raises:
    ValueError: naming the template's field, the placeholder and the ones its context fills.
  """
  for context, template in dict(templates or {}).items():
    where = f"{field}[{context!r}]"
    fills = get(context, field).fills
    if not isinstance(template, str):
      raise ValueError(terminal.field_error(where, "must be a string", template))
    for name in _PLACEHOLDER.findall(template):
      if name not in fills:
        named = ", ".join("{" + p + "}" for p in fills)
        raise ValueError(terminal.field_error(where, f"has the placeholder {{{name}}}, which the {context!r} context "
                                            "does not fill", choices=named.split(", "), near="{" + name + "}",
                                            quote=False, fix=f"it fills {named}"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TeacherConfig:
  """One configuration c = (teacher, context, divergence) of paper.md.

  config_id: the name given in `config.configurations`; teacher: "self" or a model spec (preset, HF folder,
  .gguf path); options: the divergence's checked keyword parameter as ((name, value),) or () (the registry's
  `divergences.options`, e.g. (("beta", 0.5),)); beta, clip: the record columns, JSD_beta's beta (NaN unless
  divergence == "jsd") and the clipped reverse KL's threshold tau (NaN unless divergence ==
  "clipped_reverse_kl").
  """
  config_id: str
  teacher: str
  context: str
  divergence: str
  beta: float = math.nan
  clip: float = math.nan
  options: tuple[tuple[str, float], ...] = ()

  @property
  def param(self) -> float:
    """The value of the divergence's '@' parameter (its registry `param`: beta, clip, k, ...), NaN if it takes
    none: the records' `divergence_param`."""
    return float(self.options[0][1]) if self.options else math.nan

  @property
  def scoring_key(self) -> tuple[str, str]:
    """(teacher, context): configurations sharing it share one teacher forward and one q."""
    return (self.teacher, self.context)


def parse(config_id: str, spec: str, *, field: str | None = None) -> TeacherConfig:
  """Parse `teacher:context:divergence[@param]` (the teacher may itself contain ':', e.g. a path); `field` names
  the config field in errors (default config.configurations[config_id]).

  Raises:
    ValueError: malformed spec, unknown context or divergence (listing the registered ones), a non-finite '@'
      parameter (nan, inf), jsd beta outside (0, 1), clip <= 0 or missing, or another bad parameter.
  """
  field = field or f"config.configurations[{config_id!r}]"
  where = f"{field} = {spec!r}"
  parts = spec.rsplit(":", 2)
  if len(parts) != 3 or not all(parts):
    raise ValueError(f"{where}: expected 'teacher:context:divergence', e.g. 'self:solution:reverse_kl'")
  teacher, context, div = parts
  get(context, field)
  name, options = divergences.parse(div, where=where)
  beta, clip = options.get("beta", math.nan), options.get("clip", math.nan)
  return TeacherConfig(config_id=config_id, teacher=teacher, context=context, divergence=name, beta=beta,
                       clip=clip, options=tuple(sorted(options.items())))


WITH_SOLUTIONS = ("gsm8k", "math500", "reasoning_gym:gsm_symbolic", "reasoning_gym:chain_sum",
                  "reasoning_gym:basic_arithmetic")     # tasks whose problems carry reference solutions


def parse_all(configurations: Mapping[str, str], *, has_solutions: bool, task_name: str,
              fields: Mapping[str, str] | None = None) -> list[TeacherConfig]:
  """Parse `config.configurations` (name -> spec), sorted by name, checking contexts against the task; `fields`
  names a configuration's config field in errors (default config.configurations['<name>']).

  Raises:
    ValueError: empty mapping, a bad spec, or a context that needs a reference solution on a task without one.
  """
  if not configurations:
    raise ValueError("config.configurations is empty: add at least one 'name': 'teacher:context:divergence'")
  field = lambda k: (fields or {}).get(k) or f"config.configurations[{k!r}]"
  out = [parse(k, v, field=field(k)) for k, v in sorted(configurations.items())]
  with_solutions = [t for t in WITH_SOLUTIONS if not task_name.startswith(t)]
  for c in out:
    if get(c.context).needs_solution and not has_solutions:
      raise ValueError(f"{field(c.config_id)}: context {c.context!r} needs a reference "
                       f"solution, but task {task_name!r} has none; use 'plain' or 'answer', or a task with "
                       f"solutions ({', '.join(with_solutions[:-1])} or {with_solutions[-1]})")
  return out


def render_chat(tokenizer, user_message: str, *, system_prompt: str = "",
                chat_kwargs: Mapping | None = None) -> list[int]:
  """Token ids of a one-turn chat prompt (generation prompt added), the same way for student and teacher:
  `models.chat_ids`, the one rendering function (the template's special tokens only: one BOS, never two)."""
  messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
      {"role": "user", "content": user_message}]
  return models.chat_ids(tokenizer, messages, **dict(chat_kwargs or {}))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Chat:
  """A study's chat settings, resolved once (`preflight.chat` from config.chat): the system prompt ("" none) and
  the chat template's keyword arguments (e.g. {"enable_thinking": False})."""
  system_prompt: str = ""
  kwargs: Mapping = dataclasses.field(default_factory=dict)


def study_chat(tokenizer, user_message: str, chat: Chat) -> list[int]:
  """`render_chat` with a study's `Chat` settings: the prompt ids every stage of a study (and its preflight and
  cost model) gives the student or a teacher."""
  return render_chat(tokenizer, user_message, system_prompt=chat.system_prompt, chat_kwargs=chat.kwargs)


def context_message(context: str, task, problem: task_base.Problem, *, incorrect: str | None = None,
                    templates: Mapping[str, str] | None = None) -> str | None:
  """The teacher's user message for `context`, or None when it is unavailable (a context that `needs_incorrect`
  without an incorrect rollout other than the one scored).

  Raises:
    ValueError: an unregistered context.
  """
  ctx = get(context)
  template = dict(templates or {}).get(context, ctx.template)
  if ctx.needs_incorrect and incorrect is None:
    return None
  fields = {"prompt": task.prompt(problem), "solution": problem.solution or "", "answer": problem.answer,
            "incorrect": incorrect or ""}
  if "summary" in ctx.fills:
    fields["summary"] = task_base.summarize_solution(task.name, problem.solution)
  fields.update({k: str(fn(task, problem)) for k, fn in ctx.values.items()})
  out = template
  for k, v in fields.items():       # plain replacement: solutions contain braces (\boxed{...})
    out = out.replace("{" + k + "}", v)
  return out


def incorrect_source(context: str, rewards: Sequence[float], scored: int) -> int | None:
  """Index of the incorrect rollout a `needs_incorrect` context shows when it scores rollout `scored`: the first
  incorrect rollout other than `scored` (never the scored one: that would leak its tokens), else None; None for
  a context that shows none."""
  if not get(context).needs_incorrect:
    return None
  for i, r in enumerate(rewards):
    if i != scored and r != 1.0:
      return i
  return None
