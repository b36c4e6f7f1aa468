"""The self-teacher's weights in training (config.train.teacher_weights, issue 47 item 1): `initial` (the base
student, frozen: what the study diagnoses), `current` (the student being trained), `ema@d` (an average of the
trainable params). Checked against independent forwards (`models.logits` row by row, numpy reverse KL) of the
model each teacher should be, and the EMA against its formula applied in numpy to the params' snapshots."""
import jax
import numpy as np
import pytest

from opd_jax import models
from opd_jax.training import lora
from opd_jax.training import state as state_lib
from opd_jax.training import step as step_lib
from tests.training.test_training_loop import CFG, RESPONSES, S_PROMPTS, T_PROMPTS, _model, _reverse_kl_reference

SCALE = 2.0


def _merged(student, adapters):
  return models.Model(config=CFG, params=lora.merge(student.params, adapters, scale=SCALE),
                      graphdef=student.graphdef, tokenizer=None, stop_ids=(), name="merged", sha256=None,
                      source="test")


def _run(weights: str, steps: int, accumulate: int = 1):
  """Train a LoRA student against its own privileged context for `steps` steps; per step (loss, params before the
  step, EMA teacher before the step or None)."""
  student = _model(0)
  kind, ema = step_lib.teacher_weights(weights)
  tx = state_lib.optimizer(state_lib.OptimConfig(learning_rate=0.05))
  ad = lora.init(student.params, jax.random.key(0), rank=2)             # B = 0: the base student at step 0
  st = state_lib.init_state(ad, tx, jax.random.key(1), accumulate=accumulate, teacher=ema is not None)
  fn = step_lib.make_train_step(tx, s_graph=student.graphdef, lora_scale=SCALE, divergence="reverse_kl", chunk=3,
                                vocab_size=None, accumulate=accumulate, ema=ema)
  teacher_state = student.params if kind == "initial" else None
  batch = step_lib.make_batch(S_PROMPTS, T_PROMPTS, RESPONSES, rows=4)
  out = []
  for s in range(steps):
    snap = jax.tree.map(np.array, st["params"])
    t_snap = jax.tree.map(np.array, st["teacher"]) if ema is not None else None
    st, m = fn(st, student.params, teacher_state, batch, apply=(s + 1) % accumulate == 0)
    out.append((float(m["loss"]), snap, t_snap))
  return student, out, st


def test_all_three_give_the_same_loss_at_step_0_the_base_students_reverse_kl():
  losses = [_run(w, 1)[1][0][0] for w in ("initial", "current", "ema@0.9")]
  student = _model(0)
  want = _reverse_kl_reference(student, student, S_PROMPTS, T_PROMPTS, RESPONSES)
  assert want > 1e-3                                   # the context changes the teacher: a loss to compare
  np.testing.assert_allclose(losses, want, rtol=2e-5)


@pytest.mark.parametrize("weights", ["initial", "current", "ema@0.6"])
def test_after_updates_each_teacher_is_the_model_its_name_says(weights):
  student, out, st = _run(weights, 3)
  for s, (loss, params, teacher) in enumerate(out):
    now = _merged(student, params)
    if weights == "initial":
      ref = student                                     # unchanged by the updates
    elif weights == "current":
      ref = now
    else:
      ref = _merged(student, teacher)
    np.testing.assert_allclose(loss, _reverse_kl_reference(now, ref, S_PROMPTS, T_PROMPTS, RESPONSES), rtol=1e-4,
                               atol=1e-7, err_msg=f"step {s}")
  moved = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
              for a, b in zip(jax.tree.leaves(out[0][1]), jax.tree.leaves(st["params"])))
  assert moved > 1e-3                                   # the student did move: the teachers are told apart
  if weights.startswith("ema"):                         # teacher_{k+1} = d teacher_k + (1 - d) params_{k+1}
    d, t = 0.6, out[0][1]
    for _, params, teacher in out[1:]:
      t = jax.tree.map(lambda a, p: d * a + (1 - d) * p, t, params)
      jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-8), teacher, t)
    t = jax.tree.map(lambda a, p: d * a + (1 - d) * np.asarray(p), t, st["params"])
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-8), st["teacher"], t)


def test_the_ema_teacher_moves_only_when_an_update_is_applied():
  _, out, st = _run("ema@0.5", 3, accumulate=2)
  jax.tree.map(np.testing.assert_array_equal, out[1][2], out[0][2])      # step 1 only accumulated
  changed = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(out[2][2]), jax.tree.leaves(out[1][2]))]
  assert any(changed)                                                    # step 2 applied: the teacher moved


@pytest.mark.parametrize("spec", ["ema@1", "ema@0", "ema@x", "frozen", "", None, "ema@ 0.99", "ema@0.99 ", "ema@nan"])
def test_bad_teacher_weights_name_the_field_and_the_forms(spec):
  with pytest.raises(ValueError, match=r"config\.train\.teacher_weights=.*'initial'.*'current'.*'ema@<d>'"):
    step_lib.teacher_weights(spec)


def test_self_plain_trains_nothing_in_the_jitted_loop(tmp_path):
  """self:plain (the student reading its own prompt) is the trainer's null control: loss, gradient and update
  exactly 0 at every step. The smoke loop's second step once had a gradient norm of 1.04e-7 at a loss of exactly
  0 (the backward recomputed both sides' logits and XLA rounded them an ulp apart), which Adam turned into a step
  of the learning rate's size; the loss now keeps the forward's p == q comparison (losses.py)."""
  from configs import opd_train  # pylint: disable=g-import-not-at-top
  from opd_jax.training import loop  # pylint: disable=g-import-not-at-top
  import pandas as pd  # pylint: disable=g-import-not-at-top
  config = opd_train.get_config("smoke")
  config.logging.progress = False
  config.train.update(configuration="self:plain:reverse_kl", teacher_weights="current")
  assert config.train.chunk == 8          # the loss in chunks of 8 of the batch's 16 positions: the case that failed
  loop.run(config, str(tmp_path))
  m = pd.read_csv(tmp_path / "train" / "metrics.csv")
  assert len(m) == config.train.steps and (m[["loss", "grad_norm", "update_norm"]] == 0).all().all(), m
  assert pd.read_csv(tmp_path / "train" / "eval.csv").n_changed_rows.tolist() == [0]   # the student did not move
