"""Train state, optimizer and orbax checkpoints (opd_jax.training.state)."""
import os
import pathlib
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from opd_jax.training import state as state_lib


def _params():
  k1, k2 = jax.random.split(jax.random.key(0))
  return {"a": jax.random.normal(k1, (3, 4)), "b": {"c": jax.random.normal(k2, (4,))}}


def _loss(params):
  return jnp.sum(jnp.sin(params["a"]) ** 2) + jnp.sum((params["b"]["c"] - 1.0) ** 2)


def _steps(tx, st, n):
  for _ in range(n):
    grads = jax.grad(_loss)(st["params"])
    updates, opt_state = tx.update(grads, st["opt_state"], st["params"])
    st = {**st, "params": optax.apply_updates(st["params"], updates), "opt_state": opt_state, "step": st["step"] + 1}
  return st


def test_optimizer_is_clipped_adamw_with_warmup():
  cfg = state_lib.OptimConfig(learning_rate=0.1, warmup_steps=2, clip_norm=0.5, weight_decay=0.01)
  sched = state_lib.schedule(cfg)
  np.testing.assert_allclose([sched(0), sched(1), sched(2), sched(10)], [0.0, 0.05, 0.1, 0.1], rtol=1e-6)
  params = _params()
  by_hand = optax.chain(optax.clip_by_global_norm(0.5), optax.adamw(sched, weight_decay=0.01))
  got = _steps(state_lib.optimizer(cfg), state_lib.init_state(params, state_lib.optimizer(cfg), jax.random.key(1)), 3)
  want = _steps(by_hand, state_lib.init_state(params, by_hand, jax.random.key(1)), 3)
  jax.tree.map(lambda x, y: np.testing.assert_array_equal(x, y), got["params"], want["params"])
  assert float(_loss(got["params"])) < float(_loss(params))
  with pytest.raises(ValueError, match="config.train.optim.learning_rate"):
    state_lib.OptimConfig(learning_rate=0.0)


def test_checkpoint_round_trip_types_and_identity_guard(tmp_path):
  tx = state_lib.optimizer(state_lib.OptimConfig(learning_rate=0.1, accumulate=2))
  st = _steps(tx, state_lib.init_state(_params(), tx, jax.random.key(3)), 3)
  ckpt = state_lib.Checkpoints(tmp_path / "ckpt", identity={"config_hash": "abc", "base_model": "sha1"})
  ckpt.save(3, st, {"cursor": 7})
  ckpt.close()
  abstract = jax.eval_shape(lambda: state_lib.init_state(_params(), tx, jax.random.key(0)))
  again = state_lib.Checkpoints(tmp_path / "ckpt", identity={"config_hash": "abc", "base_model": "sha1"})
  assert again.latest_step() == 3
  got, meta = again.restore(abstract)
  assert meta["cursor"] == 7
  assert type(got["opt_state"]) is type(st["opt_state"])        # an optax chain state, not a dict
  jax.tree.map(lambda x, y: np.testing.assert_array_equal(x, y), got, st)
  # The restored state continues exactly like the uninterrupted one.
  jax.tree.map(lambda x, y: np.testing.assert_array_equal(x, y), _steps(tx, got, 2)["params"],
               _steps(tx, st, 2)["params"])
  again.close()
  other = state_lib.Checkpoints(tmp_path / "ckpt", identity={"config_hash": "abc", "base_model": "sha2"})
  with pytest.raises(ValueError, match="another base_model .*'sha1'.*'sha2'"):
    other.restore(abstract)
  other.close()


DEVICE_COUNT = '''
import sys, jax, jax.numpy as jnp, numpy as np, optax
from jax.sharding import NamedSharding, PartitionSpec as P
from opd_jax.training import state as state_lib
what, directory = sys.argv[1], sys.argv[2]
n = len(jax.devices())
mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model")) if n == 8 else None
w = np.arange(64, dtype=np.float32).reshape(8, 8) / 10
params = {"w": w if mesh is None else jax.device_put(w, NamedSharding(mesh, P("data", "model")))}
tx = state_lib.optimizer(state_lib.OptimConfig(learning_rate=0.1))
fresh = lambda p: state_lib.init_state(p, tx, jax.random.key(0))
ck = state_lib.Checkpoints(directory, identity={"config_hash": "h"})
if what == "save":                     # one real update: nonzero moments, step 1
  st = fresh(params)
  upd, opt = tx.update(jax.tree.map(lambda x: 0.5 * x, st["params"]), st["opt_state"], st["params"])
  st = {**st, "step": st["step"] + 1, "params": optax.apply_updates(st["params"], upd), "opt_state": opt}
  ck.save(1, st, {"cursor": 1})
else:
  st, _ = ck.restore(state_lib.restore_target(fresh, params, mesh=mesh))
  specs = {tuple(x.sharding.spec) if mesh is not None else "one" for x in jax.tree.leaves(st["params"])}
  print(sorted(specs), flush=True)
ck.close()
np.savez(directory + f"-{what}-{n}.npz", *[np.asarray(x) for x in jax.tree.leaves(st)])
'''


@pytest.mark.parametrize("saved_on,restored_on", [(8, 1), (1, 8)])
def test_a_checkpoint_restores_on_another_device_count(tmp_path, saved_on, restored_on):
  """Issue 26, item 7: a train state saved on 8 (fake CPU) devices restores on 1, and one saved on 1 restores
  on 8 sharded like a fresh one (`restore_target`); params, moments, step and key equal to the saved ones."""
  repo = str(pathlib.Path(__file__).resolve().parents[2])
  directory = str(tmp_path / "ckpt")
  out = {}
  for what, n in (("save", saved_on), ("restore", restored_on)):
    env = dict(os.environ, PYTHONPATH=repo, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={n}")
    got = subprocess.run([sys.executable, "-c", DEVICE_COUNT, what, directory], env=env, capture_output=True,
                         text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    out[what] = (np.load(f"{directory}-{what}-{n}.npz"), got.stdout)
  saved, restored = out["save"][0], out["restore"][0]
  assert len(saved.files) == len(restored.files) >= 5
  for k in saved.files:
    np.testing.assert_array_equal(restored[k], saved[k])
  assert np.any(saved[saved.files[1]] != 0)                              # a moment the update moved
  assert out["restore"][1].strip() == ("['one']" if restored_on == 1 else "[('data', 'model')]")


STOPPED_AFTER_SAVE = '''
import sys, jax.numpy as jnp
from opd_jax.training import state as state_lib
how, directory = sys.argv[1], sys.argv[2]
if how == "with":
  with state_lib.Checkpoints(directory, identity={"config_hash": "h"}) as ck:
    ck.save(7, {"step": jnp.int32(7), "w": jnp.arange(64.0)}, {"cursor": 7})
    raise ValueError("boom")
ck = state_lib.Checkpoints(directory, identity={"config_hash": "h"})
ck.save(7, {"step": jnp.int32(7), "w": jnp.arange(64.0)}, {"cursor": 7})   # no wait, no close
if how == "error":
  raise RuntimeError("boom")
if how == "exit":
  sys.exit(3)
raise KeyboardInterrupt
'''


def test_a_save_in_flight_survives_an_error_exit_or_interrupt_without_wait(tmp_path):
  """Issue 34, item 5: a program that saves step 7 and then dies of an uncaught error, sys.exit or Ctrl-C
  without waiting (a fork's own loop) still ends with step 7 complete on disk and no orbax tmp folder; so does
  an exception leaving a `with Checkpoints(...)` block. Each case in its own interpreter, side by side."""
  repo = str(pathlib.Path(__file__).resolve().parents[2])
  env = dict(os.environ, PYTHONPATH=repo, JAX_PLATFORMS="cpu")
  cases = {"error": 1, "exit": 3, "interrupt": -signal.SIGINT, "with": 1}   # Python dies of SIGINT on Ctrl-C
  procs = {how: subprocess.Popen([sys.executable, "-c", STOPPED_AFTER_SAVE, how, str(tmp_path / how)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for how in cases}
  for how, rc in cases.items():
    _, err = procs[how].communicate(timeout=300)
    assert procs[how].returncode == rc, err[-2000:]
    assert sorted(p.name for p in (tmp_path / how).iterdir()) == ["7"], how      # no `7.orbax-checkpoint-tmp`
    ck = state_lib.Checkpoints(tmp_path / how, identity={"config_hash": "h"})
    st, meta = ck.restore(None)
    ck.close()
    assert int(st["step"]) == 7 and meta["cursor"] == 7, how
    np.testing.assert_array_equal(st["w"], np.arange(64.0))
