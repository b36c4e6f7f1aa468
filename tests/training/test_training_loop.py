"""The OPD train step and loop (opd_jax/training): the loss against an independent forward, self:plain gives
exact zeros, and a run killed with SIGKILL resumes to the uninterrupted run's final params."""
import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pandas as pd
import pytest

from opd_jax import models
from opd_jax.decode import sampling
from opd_jax.training import lora
from opd_jax.training import loop
from opd_jax.training import state as state_lib
from opd_jax.training import step as step_lib
from tests.training.test_losses import _np_policy

REPO = pathlib.Path(__file__).resolve().parents[2]
CFG = models.Config(arch="qwen2", vocab_size=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                    d_ff=64, qkv_bias=True)
S_PROMPTS = [[3, 4, 5], [7, 8, 9, 10, 11], [12]]
T_PROMPTS = [[3, 4, 5, 20, 21, 22], [7], [13, 14]]
RESPONSES = [[30, 31, 32, 33], [34], []]


def _model(seed):
  return models.random_model(CFG, seed=seed, layout="stacked")


def _reverse_kl_reference(student, teacher, s_prompts, t_prompts, responses, policy=None, tq=1.0):
  """Per-sequence mean of KL(p_t || q_t) over response tokens, then the mean over sequences with a response:
  each row run alone through models.logits (no padding), numpy on the full vocabulary; policy: p is that
  policy (float64 numpy, tests/training/test_losses.py) and q = softmax(z_q / tq)."""
  per_seq = []
  for sp, tp, y in zip(s_prompts, t_prompts, responses):
    if not y:
      continue
    zs = np.asarray(models.logits(student, np.array([sp + y])))[0, len(sp) - 1:len(sp) - 1 + len(y)]
    zt = np.asarray(models.logits(teacher, np.array([tp + y])))[0, len(tp) - 1:len(tp) - 1 + len(y)]
    lp = zs - np.log(np.sum(np.exp(zs - zs.max(-1, keepdims=True)), -1, keepdims=True)) - zs.max(-1, keepdims=True)
    lq = zt - np.log(np.sum(np.exp(zt - zt.max(-1, keepdims=True)), -1, keepdims=True)) - zt.max(-1, keepdims=True)
    if policy is not None:
      lp, lq = _np_policy(zs, policy.temperature, policy.top_k, policy.top_p), _np_policy(zt, tq)
    per_seq.append(np.mean(np.sum(np.where(lp > -np.inf, np.exp(lp) * (lp - lq), 0.0), -1)))
  return float(np.mean(per_seq))


def test_loss_is_the_reverse_kl_of_independent_forwards_and_self_plain_is_exactly_zero():
  student, teacher = _model(0), _model(1)
  batch = step_lib.make_batch(S_PROMPTS, T_PROMPTS, RESPONSES, rows=4)
  assert batch.mask.sum() == 5 and batch.tokens_s.shape[0] == 4
  ad = lora.init(student.params, jax.random.key(0), rank=2)
  ad = jax.tree.map(lambda x: x + 0.05, ad)              # b != 0: the merged student differs from the base
  merged = models.Model(config=CFG, params=lora.merge(student.params, ad, scale=2.0), graphdef=student.graphdef,
                        tokenizer=None, stop_ids=(), name="merged", sha256=None, source="test")
  loss = step_lib.loss_fn(ad, student.params, teacher.params, batch, s_graph=student.graphdef,
                          t_graph=teacher.graphdef, lora_scale=2.0, divergence="reverse_kl", chunk=3, vocab_size=None)
  want = _reverse_kl_reference(merged, teacher, S_PROMPTS, T_PROMPTS, RESPONSES)
  np.testing.assert_allclose(float(loss), want, rtol=2e-5)
  # Per-layer remat (the default) changes memory, not the gradients.
  kw = dict(s_graph=student.graphdef, t_graph=teacher.graphdef, lora_scale=2.0, divergence="reverse_kl", chunk=3,
            vocab_size=None)
  g = [jax.grad(lambda a, r=r: step_lib.loss_fn(a, student.params, teacher.params, batch, remat=r, **kw))(ad)
       for r in (True, False)]
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7), *g)
  # self:plain (the student reading its own prompt): zero loss, zero gradients, and with weight decay 0 no update.
  tx = state_lib.optimizer(state_lib.OptimConfig(learning_rate=0.1, weight_decay=0.0))
  plain = step_lib.make_batch(S_PROMPTS, S_PROMPTS, RESPONSES)
  for trainable, base, scale in ((ad, student.params, 2.0), (student.params, None, None)):
    st = state_lib.init_state(trainable, tx, jax.random.key(1))
    before = jax.tree.map(np.asarray, st["params"])
    fn = step_lib.make_train_step(tx, s_graph=student.graphdef, lora_scale=scale, divergence="jsd@0.5", chunk=4,
                                  vocab_size=None)
    st, m = fn(st, base, None, plain)
    assert float(m["loss"]) == 0.0 and float(m["grad_norm"]) == 0.0
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, st["params"]), before)
  # A small step moves the adapters and lowers the loss of that batch.
  tx = state_lib.optimizer(state_lib.OptimConfig(learning_rate=1e-3))
  st = state_lib.init_state(ad, tx, jax.random.key(1))
  fn = step_lib.make_train_step(tx, s_graph=student.graphdef, t_graph=teacher.graphdef, lora_scale=2.0,
                                divergence="reverse_kl", chunk=3, vocab_size=None)
  st, m = fn(st, student.params, teacher.params, batch)
  st, m2 = fn(st, student.params, teacher.params, batch)
  assert float(m["grad_norm"]) > 0 and float(m2["loss"]) < float(m["loss"])


@pytest.mark.parametrize("sp", [sampling.SamplingParams(temperature=0.5),
                                sampling.SamplingParams(temperature=0.7, top_k=5, top_p=0.9)],
                         ids=["T0.5", "T0.7-k5-p0.9"])
def test_loss_at_another_temperature_is_the_kl_of_the_sampled_policy(sp):
  """Issue 26, item 4: the train step's loss is KL(p || q) with p the sampled policy (temperature, top-k, top-p)
  and q the teacher at T_q (here 0.8), against independent forwards and a float64 numpy policy; the
  temperature-1 loss (what the trainer computed before) differs."""
  student, teacher = _model(0), _model(1)
  batch = step_lib.make_batch(S_PROMPTS, T_PROMPTS, RESPONSES, rows=4)
  kw = dict(s_graph=student.graphdef, t_graph=teacher.graphdef, lora_scale=None, divergence="reverse_kl", chunk=3,
            vocab_size=None)
  tq = sampling.SamplingParams(temperature=0.8)
  loss = step_lib.loss_fn(student.params, None, teacher.params, batch, policy=sp, teacher_policy=tq, **kw)
  want = _reverse_kl_reference(student, teacher, S_PROMPTS, T_PROMPTS, RESPONSES, policy=sp, tq=0.8)
  np.testing.assert_allclose(float(loss), want, rtol=2e-5)
  unit = step_lib.loss_fn(student.params, None, teacher.params, batch, **kw)
  assert abs(float(unit) - want) > 0.05 * want


def test_micro_batches_give_the_one_batch_update():
  """Gradient accumulation over micro-batches (rows i, i + k, ...) weights each by its rollouts with a response:
  the same loss and update as the whole batch, also when the empty rows fall unevenly."""
  student, teacher = _model(0), _model(1)
  batch = step_lib.make_batch(S_PROMPTS, T_PROMPTS, RESPONSES, rows=4)   # k = 4: two empty micro-batches
  ad = jax.tree.map(lambda x: x + 0.05, lora.init(student.params, jax.random.key(0), rank=2))
  tx = optax.sgd(1.0)                                   # params after one step = params - gradients
  out = []
  for k in (1, 2, 4):
    fn = step_lib.make_train_step(tx, s_graph=student.graphdef, t_graph=teacher.graphdef, lora_scale=2.0,
                                  divergence="reverse_kl", chunk=3, vocab_size=None, micro_batches=k)
    st0 = state_lib.init_state(jax.tree.map(jnp.copy, ad), tx, jax.random.key(1))   # the step donates it
    out.append(fn(st0, student.params, teacher.params, batch))
  for st, m in out[1:]:
    np.testing.assert_allclose(float(m["loss"]), float(out[0][1]["loss"]), rtol=1e-5)
    np.testing.assert_allclose(float(m["grad_norm"]), float(out[0][1]["grad_norm"]), rtol=1e-5)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7), st["params"],
                 out[0][0]["params"])
  with pytest.raises(ValueError, match="does not split into 3 micro-batches"):
    step_lib.make_train_step(tx, s_graph=student.graphdef, t_graph=teacher.graphdef, lora_scale=2.0,
                             divergence="reverse_kl", chunk=3, vocab_size=None, micro_batches=3)(
        state_lib.init_state(ad, tx, jax.random.key(1)), student.params, teacher.params, batch)


def test_steps_accumulated_into_one_update_equal_the_one_batch_update_of_their_rollouts():
  """Issue 26, item 1: an update accumulated over steps with different numbers of rollouts with a response (3, 1,
  0) equals one step on all their rollouts together (each step weighted by what it contributes, not an equal
  share), and a last window shorter than `accumulate` is applied, not dropped."""
  student, teacher = _model(0), _model(1)
  rows = [(S_PROMPTS[i % 3], T_PROMPTS[i % 3], RESPONSES[i % 3] if i not in (2, 5) else []) for i in range(6)]
  steps = [rows[:4], rows[4:6] + [rows[2], rows[2]], [rows[2]] * 4]        # 3, 1 and 0 rows with a response
  batch = lambda rs, n: step_lib.make_batch(*map(list, zip(*rs)), rows=n)
  ad = lora.init(student.params, jax.random.key(0), rank=2)
  ad = jax.tree.map(lambda x: x + 0.05, ad)
  tx = optax.sgd(1.0)                                    # params after an update = params - the gradient
  kw = dict(s_graph=student.graphdef, t_graph=teacher.graphdef, lora_scale=2.0, divergence="reverse_kl", chunk=3,
            vocab_size=None)
  one = step_lib.make_train_step(tx, **kw)
  want, m_one = one(state_lib.init_state(jax.tree.map(jnp.copy, ad), tx, jax.random.key(1)), student.params,
                    teacher.params, batch(steps[0] + steps[1] + steps[2], 12))
  acc = step_lib.make_train_step(tx, accumulate=4, **kw)
  st = state_lib.init_state(jax.tree.map(jnp.copy, ad), tx, jax.random.key(1), accumulate=4)
  for i, rs in enumerate(steps):                          # the run ends after 3 steps: the short window applies
    before = jax.tree.map(np.asarray, st["params"])
    st, m = acc(st, student.params, teacher.params, batch(rs, 4), apply=i == 2)
    if i < 2:                                             # accumulating: no update yet
      jax.tree.map(np.testing.assert_array_equal, st["params"], before)
      assert float(m["update_norm"]) == 0.0
  jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=2e-5, atol=1e-7), st["params"], want["params"])
  np.testing.assert_allclose(float(m["update_norm"]), float(m_one["update_norm"]), rtol=2e-5)
  assert float(st["acc"]["weight"]) == 0.0 and int(st["step"]) == 3
  # An equal share per step (optax.MultiSteps' mean) is another update: the test tells them apart.
  equal = state_lib.init_state(jax.tree.map(jnp.copy, ad), tx, jax.random.key(1))
  grads = [jax.grad(lambda a, b=b: step_lib.loss_fn(a, student.params, teacher.params, b, s_graph=student.graphdef,
                                                    t_graph=teacher.graphdef, lora_scale=2.0,
                                                    divergence="reverse_kl", chunk=3, vocab_size=None))(equal["params"])
           for b in (batch(steps[0], 4), batch(steps[1], 4))]
  mean = jax.tree.map(lambda p, g0, g1: p - (g0 + g1) / 2, equal["params"], *grads)
  assert max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
             for x, y in zip(jax.tree.leaves(mean), jax.tree.leaves(want["params"]))) > 1e-4


EIGHT = """
import json, sys
import jax
jax.config.update("jax_num_cpu_devices", 8)
import numpy as np
from opd_jax.models import sharding
from opd_jax.training import lora, loop, state as state_lib, step as step_lib
sys.path.insert(0, "tests/training")
from test_training_loop import S_PROMPTS, T_PROMPTS, RESPONSES, _model
student, teacher = _model(0), _model(1)
batch = step_lib.make_batch(S_PROMPTS, T_PROMPTS, RESPONSES, rows=8)
tx = state_lib.optimizer(state_lib.OptimConfig(learning_rate=1e-2))
def run(mesh, k):
  s, t = (student, teacher) if mesh is None else (sharding.shard_model(student, mesh), sharding.shard_model(teacher, mesh))
  ad = jax.tree.map(lambda x: x + 0.05, lora.init(s.params, jax.random.key(0), rank=2))
  st = state_lib.init_state(ad, tx, jax.random.key(1))
  shard = None
  if mesh is not None:
    st = loop.place_state(st, mesh)
    shard = (step_lib.shardings_of(st), step_lib.shardings_of(s.params), step_lib.shardings_of(t.params),
             step_lib.batch_shardings(mesh))
  fn = step_lib.make_train_step(tx, s_graph=s.graphdef, t_graph=t.graphdef, lora_scale=2.0, divergence="reverse_kl",
                                chunk=3, vocab_size=None, in_shardings=shard, micro_batches=k)
  st2, m = fn(st, s.params, t.params, batch)
  specs = sorted({str(getattr(x.sharding, "spec", "")) for x in jax.tree.leaves(s.params)})
  return ({k2: float(v) for k2, v in m.items()}, [np.asarray(x).tolist() for x in jax.tree.leaves(st2["params"])],
          specs, all(x.sharding == y.sharding for x, y in zip(jax.tree.leaves(st2), jax.tree.leaves(st))))
out = {"one": run(None, 1), "mesh": run(sharding.make_mesh(4, 2), 1), "mesh_micro": run(sharding.make_mesh(4, 2), 2)}
print(json.dumps(out))
"""


def test_train_step_on_8_fake_devices_equals_one_device():
  """The pjit train step (explicit in/out shardings on a (data 4, model 2) mesh, also with 2 micro-batches) gives
  the one-device step's loss, norms and updated adapters, and leaves the state where it was placed."""
  proc = subprocess.run([sys.executable, "-c", EIGHT], env=dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu"),
                        capture_output=True, text=True, timeout=300, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  m1, p1, _, _ = out["one"]
  for name in ("mesh", "mesh_micro"):
    m, p, specs, stayed = out[name]
    assert stayed and any("model" in sp for sp in specs), (name, specs)      # params really sharded
    for key in ("loss", "grad_norm", "update_norm"):
      np.testing.assert_allclose(m[key], m1[key], rtol=1e-5, err_msg=f"{name} {key}")
    # Adam's first update is lr g / (|g| + eps) per entry: fp32 round-off of a gradient near 0 (summed in another
    # order over devices or micro-batches) can move that entry's update by a visible fraction of lr = 1e-2, so the
    # adapters agree to 1e-3 of lr; a wrong split or sharding moves them by ~lr.
    for a, b in zip(p, p1):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5, err_msg=name)


KILLED = """
import os, signal, sys
from opd_jax.training import state as state_lib
save = state_lib.Checkpoints.save
def save_then_die(self, step, st, meta):
  save(self, step, st, meta)
  if step == 2:                      # SIGKILL while step 2's async save may still be in flight
    os.kill(os.getpid(), signal.SIGKILL)
state_lib.Checkpoints.save = save_then_die
from opd_jax import main
sys.argv = ["main"] + sys.argv[1:]
main.run()
"""


def _cmd(workdir, *prefix):
  return [sys.executable, *prefix, *([] if prefix else ["-m", "opd_jax.main"]),
          f"--config={REPO / 'configs/opd_train.py'}:smoke", f"--workdir={workdir}", "--config.logging.progress=False"]


@pytest.fixture(scope="module")
def trainer_env(tmp_path_factory):
  """The environment of the trainer smoke's subprocesses: one persistent XLA compilation cache for the module, so
  only the first process compiles the smoke's programs (speed only: the results do not depend on it)."""
  return dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu",
              JAX_COMPILATION_CACHE_DIR=str(tmp_path_factory.mktemp("jax_cache")),
              JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")


def test_sigkilled_run_resumes_to_the_uninterrupted_params(tmp_path, trainer_env):
  env = trainer_env
  full = subprocess.run(_cmd(tmp_path / "full"), env=env, capture_output=True, text=True, timeout=600)
  assert full.returncode == 0, full.stderr[-2000:]
  assert "paired difference" in full.stdout and "held-out pass@1 before" in full.stdout
  # After the full run, not beside it: the killed run reads its compiled programs from trainer_env's cache.
  killed = subprocess.run(_cmd(tmp_path / "cut", "-c", KILLED), env=env, capture_output=True, text=True, timeout=600)
  assert killed.returncode == -9, killed.stderr[-2000:]
  resumed = subprocess.run(_cmd(tmp_path / "cut"), env=env, capture_output=True, text=True, timeout=600)
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  assert "resumed from" in resumed.stderr
  got = {}
  for name in ("full", "cut"):
    ck = state_lib.Checkpoints(tmp_path / name / "train" / "checkpoints", identity={})
    assert ck.latest_step() == 3
    got[name] = ck.restore(None)[0]
    ck.close()
  assert set(got["full"]["params"]) and set(got["full"]["params"]) == set(got["cut"]["params"])
  jax.tree.map(np.testing.assert_array_equal, got["cut"], got["full"])           # bitwise, optimizer state too
  a, b = (pd.read_csv(tmp_path / n / "train" / "metrics.csv").drop(columns="seconds") for n in ("full", "cut"))
  pd.testing.assert_frame_equal(a, b)
  assert len(a) == 3 and (tmp_path / "full" / "train" / "metrics.png").exists()
  # Every step's rollouts as text: a resumed run rewrites the steps after its checkpoint, none twice.
  texts = {n: (tmp_path / n / "train" / "samples.jsonl").read_text() for n in ("full", "cut")}
  rows = [json.loads(line) for line in texts["full"].splitlines()]
  assert texts["cut"] == texts["full"] and sorted({r["step"] for r in rows}) == [1, 2, 3]
  assert len(rows) == 3 * 4 and all(r["tokens"] >= 1 and r["reward"] in (0.0, 1.0) for r in rows)
  # The same workdir with another base model is refused in one line, and nothing is lost.
  other = subprocess.run(_cmd(tmp_path / "cut") + ["--config.student.name=random:5"], env=env, capture_output=True,
                         text=True, timeout=600)
  assert other.returncode == 2 and other.stderr.strip().splitlines()[-1].startswith("error: ")
  assert "another" in other.stderr and (tmp_path / "cut" / "train" / "checkpoints" / "3").is_dir()


STOPPED = """
import sys
from opd_jax.training import state as state_lib
save = state_lib.Checkpoints.save
def save_then_stop(self, step, st, meta):
  save(self, step, st, meta)
  if step == 2:                      # stop at once, step 2's async save still in flight
    raise {exc}
state_lib.Checkpoints.save = save_then_stop
from opd_jax import main
sys.argv = ["main"] + sys.argv[1:]
main.run()
"""


def test_a_stop_right_after_a_save_keeps_that_checkpoint_and_says_where_a_rerun_resumes(tmp_path, trainer_env):
  """Ctrl-C or an error right after step 2's save (async, in flight): the save completes before the exit, the
  message names step 2, and a rerun resumes from it (issue 26, item 2: the rerun resumed from step 1, or from
  nothing, leaving `2.orbax-checkpoint-tmp`). Both stops run side by side, each in its own process and workdir."""
  env = trainer_env
  cases = [("KeyboardInterrupt()", 130, "interrupted: "), ("RuntimeError('disk on fire')", 2, "error: disk on fire")]
  procs = [subprocess.Popen(_cmd(tmp_path / f"w{i}", "-c", STOPPED.format(exc=exc)), env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i, (exc, _, _) in enumerate(cases)]
  for i, (proc, (_, code, last)) in enumerate(zip(procs, cases)):
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == code, stderr[-2000:]
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith(last), lines[-3:]
    assert "step 2's checkpoint is complete; a rerun of the same command resumes from step 2" in stderr
    if code == 130:                   # a Ctrl-C says it in one line (issue 50, item 7), not two
      assert lines[-1].endswith("resumes from step 2") and not any(l.startswith("training stopped") for l in lines)
    ckpt_dir = tmp_path / f"w{i}" / "train" / "checkpoints"
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["1", "2"]        # no `.orbax-checkpoint-tmp` left
    ck = state_lib.Checkpoints(ckpt_dir, identity={})
    assert ck.latest_step() == 2 and int(ck.restore(None)[0]["step"]) == 2
    ck.close()


def test_bad_training_inputs_fail_in_one_line_before_anything_is_written(tmp_path):
  """Each bad config.train field: exit 2, one `error:` line naming the field, no workdir (one interpreter start
  for all cases: tests/cli_batch.py)."""
  cases = [("config.train.configuration=self:solution:no_such", "config.train.configuration"),
           ("config.train.lora.rank=-1", "config.train.lora.rank"),
           ("config.train.micro_batch_rows=-1", "config.train.micro_batch_rows"),
           ("config.train.optim.accumulate=0", "config.train.optim.accumulate"),
           ("config.sampling.temperature=0", "config.sampling.temperature"),
           ("config.train.configuration=self:solution:forward_kl --config.sampling.top_p=0.9",
            "config.train.configuration")]
  spec = [{"argv": _cmd(tmp_path / f"w{i}")[3:] + [f"--{o}" for o in opts.split(" --")]}
          for i, (opts, _) in enumerate(cases)]
  (tmp_path / "cases.json").write_text(json.dumps(spec))
  proc = subprocess.run([sys.executable, str(REPO / "tests/cli_batch.py"), str(tmp_path / "cases.json"),
                         str(tmp_path / "out.json")], env=dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu"),
                        capture_output=True, text=True, timeout=300, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-2000:]
  for i, ((_, field), got) in enumerate(zip(cases, json.loads((tmp_path / "out.json").read_text()))):
    errors = [l for l in got["stderr"].splitlines() if l.startswith("error:")]
    assert got["code"] == 2 and len(errors) == 1 and field in errors[0], got
    assert "Traceback" not in got["stderr"] and not (tmp_path / f"w{i}").exists(), got


def test_training_cost_model_counts_the_loop():
  from configs import opd_train  # pylint: disable=g-import-not-at-top
  from opd_jax.training import costs as train_costs  # pylint: disable=g-import-not-at-top
  config = opd_train.get_config("smoke")
  t, n_tok = config.train, config.sampling.max_new_tokens
  cs = {(c.stage, c.kind, c.model): c for c in train_costs.calls(config)}
  assert cs["rollouts", "decode", "student"].count == t.steps * n_tok
  assert cs["rollouts", "decode", "student"].rows == t.batch_questions * t.rollouts_per_question
  assert cs["train step", "prompt", "student"].count == 3 * t.steps          # LoRA: forward + input gradients + remat
  assert cs["evaluation", "decode", "student"].count == 2 * n_tok            # before + at the last step
  config.train.lora.rank = 0
  assert {(c.stage, c.kind, c.model): c for c in train_costs.calls(config)}[
      "train step", "prompt", "student"].count == 4 * t.steps                # full fine-tuning: + weight gradients
  assert "train step" in train_costs.describe(config, "h200") and "expected:" in train_costs.describe(config, "h200")
  assert train_costs.describe(config, "cpu").splitlines()[0] == (   # what the dry run trains, first
      f"training: {t.configuration}; self-teacher weights {t.teacher_weights}; student {config.student.name}; "
      f"{t.steps} steps of {t.batch_questions} questions x {t.rollouts_per_question} rollouts, lr "
      f"{t.optim.learning_rate:g}, full fine-tuning")                       # lora.rank 0
  config.train.configuration = "random:1:plain:reverse_kl"                 # an external teacher: no weights field
  assert "self-teacher weights" not in train_costs.describe(config, "cpu").splitlines()[0]


def test_paired_pass_at_1_interval_stays_within_what_a_difference_of_rates_can_be():
  """Few questions: no interval (3 questions gave [-1.564, +2.231]); enough: scipy's paired t cut to [-1, 1];
  every question moved alike: not estimable, not a zero-width interval; nothing changed: [0, 0]."""
  from opd_jax.training import evaluate  # pylint: disable=g-import-not-at-top
  import scipy.stats  # pylint: disable=g-import-not-at-top
  few = evaluate.paired_difference(np.array([[0, 1], [0, 0], [1, 0]]), np.array([[1, 1], [1, 1], [0, 1]]))
  assert np.isnan(few.lo) and np.isnan(few.hi) and few.diff == pytest.approx(0.5)
  rng = np.random.default_rng(0)
  before = rng.integers(0, 2, (8, 2)).astype(float)
  after = np.ones((8, 2))
  got = evaluate.paired_difference(before, after)
  ci = scipy.stats.ttest_rel(after.mean(1), before.mean(1)).confidence_interval(0.95)
  assert got.lo == pytest.approx(max(ci.low, -1)) and got.hi == min(ci.high, 1.0) <= 1.0
  alike = evaluate.paired_difference(np.zeros((6, 2)), np.ones((6, 2)))
  assert alike.diff == 1.0 and np.isnan(alike.lo)
  same = evaluate.paired_difference(np.ones((6, 2)), np.ones((6, 2)))
  assert (same.lo, same.hi, same.n_changed_rows) == (0.0, 0.0, 0)
  from configs import opd_train  # pylint: disable=g-import-not-at-top
  from opd_jax.teachers import contexts  # pylint: disable=g-import-not-at-top
  config = opd_train.get_config("smoke")                   # the console line: "within noise" only where an interval
  conf = contexts.parse("train", config.train.configuration)   # exists and covers 0
  line = lambda p: loop._summary(config, conf, [{}], [dataclasses.asdict(p)], np.zeros((6, 2)))["text"]  # pylint: disable=protected-access
  assert "not estimable" in line(few) and "noise" not in line(few) and "noise" not in line(alike)
  assert line(same).endswith("[+0.000, +0.000] over 6 questions x 2 samples (within noise)")
