"""A training seed apart from the task's (config.train.seed, issue 47's replicates) and evaluations at chosen steps
(config.train.eval_at): a replicate keeps the question pool, the held-out questions and the evaluation's keys
(so the base model's held-out rewards are the same array) and changes what training draws (the training order, the
rollouts); evaluations happen after the steps asked and the last. The order is checked against numpy's permutation
of the training questions with the training seed, computed here."""
import json
import os
import socket

import numpy as np
import pandas as pd
import pytest

from configs import opd_train
from opd_jax import claim
from opd_jax.training import evaluate
from opd_jax.training import loop


def _config(train_seed: int, eval_at=()):
  config = opd_train.get_config("smoke")
  config.logging.progress = False
  config.train.update(seed=train_seed, eval_at=eval_at)
  return config


def test_a_replicate_keeps_the_pool_and_the_evaluation_and_changes_the_training_draws(tmp_path):
  base, rep = _config(-1), _config(7, eval_at=(1,))
  loop.run(base, str(tmp_path / "base"))
  loop.run(rep, str(tmp_path / "rep"))
  assert not list((tmp_path / "base").glob("lock.*"))                 # the workdir's lock, released (test below)
  a, b = tmp_path / "base" / "train", tmp_path / "rep" / "train"
  assert json.loads((a / "eval_questions.json").read_text()) == json.loads((b / "eval_questions.json").read_text())
  np.testing.assert_array_equal(np.load(a / "eval_before.npy"), np.load(b / "eval_before.npy"))
  np.testing.assert_array_equal(np.load(a / "eval_gold_before.npy"), np.load(b / "eval_gold_before.npy"))
  gold = [np.load(b / f"eval_gold_{n}.npy") for n in ("before", "step1", "step3")]      # log p(gold answer) [Q]
  assert all(g.shape == np.load(b / "eval_before.npy").shape[:1] and (g < 0).all() for g in gold)
  assert not np.array_equal(gold[0], gold[2])                                  # training moved it
  assert pd.read_csv(a / "eval.csv").step.tolist() == [3]                       # eval_every=3, steps=3
  assert pd.read_csv(b / "eval.csv").step.tolist() == [1, 3]                    # eval_at=(1,) and the last step
  t = base.train
  held = t.eval_questions
  n_pool = base.task.num_problems
  for run, seed in ((a, base.seed), (b, 7)):
    order = np.random.default_rng(seed).permutation(np.arange(held, n_pool)).tolist()
    lines = [json.loads(l) for l in (run / "samples.jsonl").read_text().splitlines()]
    firsts = [l["question_id"] for l in lines if l["step"] == 1][::t.rollouts_per_question]
    assert [int(q.rsplit("-", 1)[-1]) for q in firsts] == order[:t.batch_questions], (firsts, order)   # "...-00007"


def test_the_training_seed_defaults_to_config_seed_and_old_configs_hash_as_before():
  config = _config(-1)
  config.seed = 3
  assert loop.training_seed(config) == 3
  config.train.seed = 0
  assert loop.training_seed(config) == 0
  d = _config(-1).to_dict()
  old = json.loads(json.dumps(d, default=str))
  del old["train"]["seed"], old["train"]["eval_at"]
  assert claim.config_hash(d) == claim.config_hash(old)
  d["train"]["seed"] = 1
  assert claim.config_hash(d) != claim.config_hash(old)


@pytest.mark.parametrize("field,value", [("seed", -2), ("seed", True), ("eval_at", (0,)), ("eval_at", (4,))])
def test_bad_seed_or_eval_steps_name_the_field(field, value):
  config = _config(-1)
  config.train[field] = value
  with pytest.raises(ValueError, match=f"config.train.{field}"):
    loop.validate(config)


def test_eval_steps_are_the_steps_asked_and_the_last():
  t = _config(-1).train
  t.update(steps=40, eval_every=40)
  assert evaluate.eval_steps(t) == [40]
  t.eval_at = (20, 10)
  assert evaluate.eval_steps(t) == [10, 20, 40]
  t.update(eval_at=(), eval_every=15)
  assert evaluate.eval_steps(t) == [15, 30, 40]


def test_a_second_run_on_a_workdir_in_use_is_refused_before_any_model_loads(tmp_path, monkeypatch):
  """The trainer holds the workdir's lock as a study does (claim.workdir_lock): two runs on one workdir once both
  trained, writing the same checkpoints and samples."""
  from opd_jax.study import environment  # pylint: disable=g-import-not-at-top
  lock = claim.lock_path(tmp_path, 0)
  lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))    # a live run holds it
  monkeypatch.setattr(environment, "setup", lambda *a, **k: pytest.fail("models loaded"))
  with pytest.raises(ValueError, match=rf"^--workdir={tmp_path} is in use by another run with process index 0 "
                     rf"\(pid {os.getpid()} "):
    loop.run(_config(-1), str(tmp_path))
  assert lock.exists() and not (tmp_path / "train" / "checkpoints").exists()
