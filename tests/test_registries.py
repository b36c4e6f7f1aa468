"""Every registered context, divergence, predictor and task source through the smoke path (issue 37).

The parameters are read from the registries, so an entry a fork adds (docs/usage.md, "Extending") is tested here
by adding it, with no test edited. One smoke study (tiny random models, `configs/smoke.py`) runs a configuration
per context and per divergence; each entry's test reads its records and report files.
"""
import json
import math
import pathlib
import re

import numpy as np
import pandas as pd
import pytest

from configs import smoke
from opd_jax import records
from opd_jax import tasks
from opd_jax.estimators import divergences
from opd_jax.estimators import predictors
from opd_jax.tasks import base as task_base
from opd_jax.teachers import contexts


def _divergence_spec(name: str) -> str:
  d = divergences.get(name)
  value = d.example if d.example is not None else d.default
  return name if d.param is None or value is None else f"{name}@{value:g}"


@pytest.fixture(scope="module")
def study(tmp_path_factory):
  """One smoke study: `ctx_<name>` = self:<context>:reverse_kl for every context, `div_<name>` =
  self:solution:<divergence>[@example] for every divergence, and the random external teacher forced through text
  (a view that reads text: `teachers/cross_view.py`)."""
  from opd_jax.study import pipeline  # pylint: disable=g-import-not-at-top
  workdir = tmp_path_factory.mktemp("registries")
  config = smoke.get_config()
  config.logging.progress = False
  config.configurations = {"external": "random:1:plain:reverse_kl",
                           **{f"ctx_{c}": f"self:{c}:reverse_kl" for c in contexts.REGISTRY},
                           **{f"div_{d}": f"self:solution:{_divergence_spec(d)}" for d in divergences.REGISTRY}}
  config.random_model.n_layers = 1                  # sizes: what reaches the records does not depend on them
  config.budget.questions = 1
  config.budget.node_rollouts_per_question = 1      # 2 nodes per configuration (alignment defined on both)
  config.budget.nodes_per_rollout = 2
  config.budget.continuations_per_candidate = 2
  config.sampling.max_new_tokens = 8
  config.scoring.cross_tokenizer.force = True
  pipeline.run(config, str(workdir))
  return {"workdir": workdir, "nodes": records.read_table(workdir, "nodes"),
          "tokens": records.read_table(workdir, "tokens"),
          "summary": pd.read_csv(workdir / "summary.csv"), "predictors": pd.read_csv(workdir / "predictors.csv")}


@pytest.mark.parametrize("name", list(contexts.REGISTRY))
def test_every_context_scores_and_reaches_the_report(study, name):
  tok = study["tokens"]
  view = tok[(tok.teacher == contexts.SELF) & (tok.context == name)]
  assert len(view), f"no scored tokens for context {name!r}"
  nodes = study["nodes"][study["nodes"].config_id == f"ctx_{name}"]
  assert len(nodes) and (nodes.context == name).all()
  assert nodes.q.map(len).gt(0).any(), f"no node of context {name!r} has q on C(u)"
  assert f"ctx_{name}" in set(study["summary"].config_id)


@pytest.mark.parametrize("name", list(divergences.REGISTRY))
def test_every_divergence_gives_a_direction_and_records_its_parameter(study, name):
  d = divergences.get(name)
  nodes = study["nodes"][study["nodes"].config_id == f"div_{name}"]
  assert len(nodes) and (nodes.divergence == name).all()
  _, options = divergences.parse(_divergence_spec(name))
  want = float(options[d.param]) if d.param else math.nan
  got = nodes.divergence_param.to_numpy(np.float64)
  assert np.all(got == want) if d.param else np.isnan(got).all()
  assert nodes.alignment.notna().any(), "no defined alignment"
  # The recomputed estimates (the validation table's path) read the recorded parameter back: same alignment.
  again = records.estimates_from_rows(nodes.reset_index(drop=True))
  np.testing.assert_allclose(again["alignment"], nodes.alignment.to_numpy(np.float64), atol=1e-9)
  summary = study["summary"][study["summary"].config_id == f"div_{name}"]
  assert len(summary) and (summary.divergence == name).all()


@pytest.mark.parametrize("name", list(predictors.REGISTRY))
def test_every_predictor_is_recorded_and_reaches_the_predictor_table(study, name):
  """Finite on every same-tokenizer view; on the view that reads text, formed by its `on_text` where it has one
  and NaN otherwise (a new predictor is undefined there by default, never the student's value by mistake)."""
  tok = study["tokens"]
  assert name in records.PREDICTORS and name in tok.columns
  same = tok[tok.teacher == contexts.SELF]
  assert np.isfinite(same[name].to_numpy(np.float64)).all(), f"{name} not finite on a same-tokenizer view"
  text = tok[tok.teacher == "random:1"][name].to_numpy(np.float64)
  assert len(text)
  if predictors.REGISTRY[name].on_text is None:
    assert np.isnan(text).all()
  else:
    assert np.isfinite(text).all()
  assert name in set(study["predictors"].predictor)


def test_an_unknown_divergence_names_the_divergence_registry():
  with pytest.raises(ValueError) as err:
    contexts.parse("mine", "self:solution:revers_kl")
  assert "opd_jax/estimators/divergences.py" in str(err.value) and "predictors.py" not in str(err.value)
  assert "'reverse_kl'" in str(err.value)                     # the nearest registered name


def test_every_predictor_has_its_glossary_line_from_the_registry(monkeypatch):
  """The report's glossary is generated from the registry: every predictor's `about`, a fork's included."""
  from opd_jax.report import page  # pylint: disable=g-import-not-at-top
  mine = predictors.Predictor(name="top1_agree", about="1 where argmax p = argmax q",
                              fn=lambda lp, lq, y: lp[..., 0], reference=lambda lp, lq, y: lp[..., 0])
  monkeypatch.setitem(predictors.REGISTRY, mine.name, mine)
  lines = page.glossary()
  for name, pred in predictors.REGISTRY.items():
    assert lines[name] == f"predictor: {pred.about}", name
  assert "<dt>top1_agree</dt><dd>predictor: 1 where argmax p = argmax q</dd>" in page.glossary_html()


def test_the_view_that_reads_text_writes_q_and_its_sampled_token_log_ratio(study):
  """The external teacher forced through text: q on every node's C(u), a defined alignment, the sampled token's
  log q from its text."""
  nodes = study["nodes"][study["nodes"].config_id == "external"]
  tok = study["tokens"][study["tokens"].teacher == "random:1"]
  assert len(nodes) and nodes.q.map(len).gt(0).all() and nodes.alignment.notna().any()
  assert np.isfinite(tok.logq).all()
  np.testing.assert_allclose(tok.logq_minus_logp, tok.logq - tok.logp, atol=1e-5)


class _Task:
  """A task stand-in for rendering contexts: its prompt wraps the question, its solution has two equations."""
  name = "stub"

  def prompt(self, problem):
    return f"Q: {problem.question}"


_PROBLEM = task_base.Problem(id="stub-0", question="What is 2 + 3?", answer="5", solution="2 + 3 = 5\nso 5 = 5")


@pytest.mark.parametrize("name", list(contexts.REGISTRY))
def test_every_context_fills_every_placeholder_of_its_template(name):
  """No `{placeholder}` of a registered template reaches the teacher verbatim (a new placeholder needs `fills`
  and `values`; the entry is refused otherwise, `Context.__post_init__`)."""
  ctx = contexts.REGISTRY[name]
  msg = contexts.context_message(name, _Task(), _PROBLEM, incorrect="a wrong attempt")
  left = [p for p in re.findall(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", ctx.template) if "{" + p + "}" in msg]
  assert not left, f"context {name!r} sends {left} to the teacher verbatim"
  assert _Task().prompt(_PROBLEM) in msg or "{prompt}" not in ctx.template


def test_a_context_with_a_placeholder_it_does_not_fill_is_refused_when_registered():
  """The fork's trap: a template with a new placeholder, `{first_step}`, and nothing else changed."""
  template = "{prompt}\n\nThe first step of a reference solution: {first_step}"
  with pytest.raises(ValueError, match=r"context 'first'.*placeholder \{first_step\}"):
    contexts.Context(name="first", template=template, needs_solution=True)
  with pytest.raises(ValueError, match=r"context 'first' fills \{first_step\}, which nothing computes"):
    contexts.Context(name="first", template=template, fills=("prompt", "first_step"), needs_solution=True)
  first = contexts.Context(name="first", template=template, fills=("prompt", "first_step"), needs_solution=True,
                           values={"first_step": lambda task, problem: problem.solution.splitlines()[0]})
  with pytest.MonkeyPatch.context() as mp:
    mp.setitem(contexts.REGISTRY, "first", first)
    msg = contexts.context_message("first", _Task(), _PROBLEM)
    with pytest.raises(ValueError, match=r"\{hint\}"):
      contexts.check_templates({"first": "{prompt} {hint}"})
  assert msg == "Q: What is 2 + 3?\n\nThe first step of a reference solution: 2 + 3 = 5"


def _task_case(source: tasks.Source, tmp_path, shared_data_dir):
  """(name, load_task keywords) for one registered source; a source that loads offline from its name alone
  (generators) needs nothing here."""
  if source.name == "jsonl":
    path = tmp_path / "mine.jsonl"
    rows = [{"question": "What is 2 + 3?", "answer": 5, "solution": "2 + 3 = 5"},
            {"question": "What is 10 - 4?", "answer": "6", "id": "ten-minus-four"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return "jsonl:numeric", {"path": str(path)}
  if source.name in ("gsm8k", "math500"):
    if not shared_data_dir.is_dir():
      pytest.skip(f"shared data not found at {shared_data_dir}")
    return source.name, {"data_dir": str(shared_data_dir)}
  if source.name == "tfds":
    pytest.importorskip("tensorflow_datasets", reason="tensorflow-datasets not installed")
    pytest.importorskip("array_record", reason="array-record not installed")
    import sys  # pylint: disable=g-import-not-at-top
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "tasks"))   # as tests/tasks/test_tasks.py
    import tfds_fixture  # pylint: disable=g-import-not-at-top
    return f"tfds:{tfds_fixture.build(str(tmp_path))}", {"data_dir": str(tmp_path), "grader": "numeric",
                                                         "solution_field": "solution"}
  assert source.examples, f"give task source {source.name!r} an example name that loads offline (`examples`)"
  return source.examples[0], {}


@pytest.mark.parametrize("name", list(tasks.REGISTRY))
def test_every_task_source_loads_grades_and_renders_every_context(name, tmp_path):
  from tests.conftest import SHARED_DATA  # pylint: disable=g-import-not-at-top
  task_name, kw = _task_case(tasks.REGISTRY[name], tmp_path, SHARED_DATA)
  task = tasks.check_answers(tasks.load_task(task_name, num_problems=2, **kw))
  assert task.problems and len({p.id for p in task.problems}) == len(task.problems)
  problem = task.problems[0]
  assert problem.question in task.prompt(problem)
  assert task.reward(problem, "") == 0.0
  for ctx in contexts.REGISTRY.values():
    if ctx.needs_solution and not task.has_solutions:
      continue
    msg = contexts.context_message(ctx.name, task, problem, incorrect="a wrong attempt")
    assert msg is not None and task.prompt(problem) in msg
