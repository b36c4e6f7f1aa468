"""The question stages' resolved settings (opd_jax/study/spec.py): the config's values, frozen, and the only thing
`questions.py` reads."""
import ast
import dataclasses
import pathlib

import pytest

from configs import smoke
from configs import teacher_sweep
from opd_jax.report import looks
from opd_jax.study import pipeline
from opd_jax.study import preflight
from opd_jax.study import questions
from opd_jax.study import spec


@pytest.mark.parametrize("get", [smoke.get_config, teacher_sweep.get_config])
def test_resolve_keeps_the_configs_values(get):
  c = get()
  s = spec.resolve(c)
  for f in dataclasses.fields(spec.Budget):
    want = preflight.allocation(c) if f.name == "allocation" else c.budget[f.name]
    got = getattr(s.budget, f.name)
    assert got == want and type(got) is type(want), f.name             # no cast: records cannot move
  for f in ("chunk", "top_k", "beta", "all_rollouts"):
    assert getattr(s.scoring, f) == c.scoring[f]
  assert dataclasses.asdict(s.scoring.cross_tokenizer) == dict(c.scoring.cross_tokenizer)
  assert (s.seed, s.selection, s.grade_truncated, s.max_new_tokens) == (
      c.seed, c.selection, c.task.grade_truncated, c.sampling.max_new_tokens)
  assert s.policy == preflight.policy(c) and s.teacher_policy == preflight.teacher_policy(c)
  assert (s.questions, s.question_batch, s.looks) == (c.budget.questions, c.budget.question_batch, looks.resolve(c))
  assert dict(s.templates) == dict(c.contexts.templates or {})
  with pytest.raises(dataclasses.FrozenInstanceError):
    s.budget.branch_batch = 1
  with pytest.raises(TypeError):
    s.templates["solution"] = "{prompt}"                                  # read-only
  c.budget.adaptive = True                                                 # the older switch reads as "adaptive"
  assert spec.resolve(c).budget.allocation == "adaptive"


def _reads(tree) -> set[str]:
  return ({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
          | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)})


def test_the_question_stages_and_loop_never_read_the_config():
  """No name `config` and no `.config` attribute in questions.py, nor in pipeline.run_questions (the question
  loop): their settings come from env.spec."""
  reads = _reads(ast.parse(pathlib.Path(questions.__file__).read_text()))
  assert "config" not in reads and "preflight" not in reads
  loop = next(n for n in ast.walk(ast.parse(pathlib.Path(pipeline.__file__).read_text()))
              if isinstance(n, ast.FunctionDef) and n.name == "run_questions")
  assert "config" not in _reads(loop)
