"""Train state, optimizer and orbax checkpoints (opd_jax.training.state)."""
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
  assert type(got["opt_state"]) is type(st["opt_state"])        # optax.MultiStepsState, not a dict
  jax.tree.map(lambda x, y: np.testing.assert_array_equal(x, y), got, st)
  # The restored state continues exactly like the uninterrupted one.
  jax.tree.map(lambda x, y: np.testing.assert_array_equal(x, y), _steps(tx, got, 2)["params"],
               _steps(tx, st, 2)["params"])
  again.close()
  other = state_lib.Checkpoints(tmp_path / "ckpt", identity={"config_hash": "abc", "base_model": "sha2"})
  with pytest.raises(ValueError, match="another base_model .*'sha1'.*'sha2'"):
    other.restore(abstract)
  other.close()
