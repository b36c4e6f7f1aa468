"""A fork adds a self-distillation context by touching opd_jax/contexts.py only (README, "Your own models")."""
import pytest

from opd_jax import contexts
from opd_jax import tasks


def test_a_new_context_is_one_entry_in_contexts_py(monkeypatch):
  monkeypatch.setattr(contexts, "CONTEXTS", contexts.CONTEXTS + ("answer_first",))
  monkeypatch.setitem(contexts.TEMPLATES, "answer_first", "The answer is {answer}.\n\n{prompt}")
  conf = contexts.parse("mine", "self:answer_first:reverse_kl")
  assert (conf.teacher, conf.context, conf.divergence) == ("self", "answer_first", "reverse_kl")
  task = tasks.load_task("synthetic:parity", num_problems=2, seed=0)
  problem = task.problems[0]
  assert contexts.context_message("answer_first", task, problem) == (
      f"The answer is {problem.answer}.\n\n{task.prompt(problem)}")
  with pytest.raises(ValueError, match="unknown context 'hint'"):
    contexts.parse("mine", "self:hint:reverse_kl")
