"""Train state, optimizer and checkpoints of the OPD trainer (optax + orbax-checkpoint).

The train state is a plain pytree, so one jitted step can take it donated:

  {"step": int32 [], "params": the trainable params (LoRA factors or the full model state),
   "opt_state": optax state of `optimizer(...)`, "rng": uint32 [2] raw PRNG key data (jax.random.key_data),
   "acc": only with accumulate > 1: {"grads": fp32 like params, "weight": fp32 []}, the update being accumulated
          over steps (`training.step.make_train_step`),
   "teacher": only with an EMA self-teacher (config.train.teacher_weights "ema@d"): the averaged params, like
          params}

A checkpoint is that pytree (orbax `StandardSave`) plus a JSON record (`meta`): the data cursor, the config
hash and the base model's identity. `Checkpoints.restore` refuses a directory written by another config or
over another base model, in one `ValueError` naming the field and the fix; optax states come back as their
own types because they are restored against `jax.eval_shape` of the initial state.
"""
from __future__ import annotations

import dataclasses
import logging as logging_lib
import pathlib
import threading
from typing import Any

import jax
import jax.numpy as jnp
import optax
import orbax.checkpoint as ocp

State = dict[str, Any]


class _QuietOrbax(logging_lib.Filter):
  """Drops orbax-checkpoint's INFO records (several per save) from absl's handler; warnings pass."""

  def filter(self, record):
    return record.levelno >= logging_lib.WARNING or "orbax" not in record.pathname


logging_lib.getLogger("absl").addFilter(_QuietOrbax())


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimConfig:
  """AdamW with global-norm clipping and a warmup + constant/cosine schedule (optax).

  Defaults follow tinker-cookbook's LoRA recipe (learning rate 1e-4, no weight decay).
  """
  learning_rate: float = 1e-4
  warmup_steps: int = 0
  schedule: str = "constant"   # "constant" | "cosine" (cosine decays to 0 at total_steps)
  total_steps: int = 1
  weight_decay: float = 0.0
  clip_norm: float = 1.0       # <= 0: no clipping
  b1: float = 0.9
  b2: float = 0.999
  accumulate: int = 1          # one update every `accumulate` steps (and at the last), each step's gradient
                               # weighted by its rollouts with a response (training.step.make_train_step)

  def __post_init__(self):
    checks = {"learning_rate": self.learning_rate > 0, "warmup_steps": self.warmup_steps >= 0,
              "total_steps": self.total_steps >= 1, "weight_decay": self.weight_decay >= 0,
              "accumulate": self.accumulate >= 1, "schedule": self.schedule in ("constant", "cosine")}
    for field, ok in checks.items():
      if not ok:
        raise ValueError(f"config.train.optim.{field}={getattr(self, field)!r} is invalid: learning_rate > 0, "
                         "warmup_steps >= 0, total_steps >= 1, weight_decay >= 0, accumulate >= 1, "
                         "schedule 'constant' or 'cosine'")


def schedule(cfg: OptimConfig) -> optax.Schedule:
  """Learning rate per update: linear warmup from 0 over warmup_steps, then constant or cosine to 0."""
  if cfg.schedule == "cosine":
    return optax.warmup_cosine_decay_schedule(0.0, cfg.learning_rate, cfg.warmup_steps,
                                              max(cfg.total_steps, cfg.warmup_steps + 1))
  if cfg.warmup_steps == 0:
    return optax.constant_schedule(cfg.learning_rate)
  return optax.join_schedules([optax.linear_schedule(0.0, cfg.learning_rate, cfg.warmup_steps),
                               optax.constant_schedule(cfg.learning_rate)], [cfg.warmup_steps])


def optimizer(cfg: OptimConfig) -> optax.GradientTransformation:
  """optax.chain(clip_by_global_norm, adamw(schedule)): one call per update. Accumulation over steps
  (cfg.accumulate) is the train step's (`training.step.make_train_step`), not optax.MultiSteps: MultiSteps gives
  every step an equal share and never applies a last partial window."""
  parts = [optax.clip_by_global_norm(cfg.clip_norm)] if cfg.clip_norm > 0 else []
  parts.append(optax.adamw(schedule(cfg), b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay))
  return optax.chain(*parts)


def init_state(params, tx: optax.GradientTransformation, rng: jax.Array, accumulate: int = 1,
               teacher: bool = False) -> State:
  """The train state at step 0 (see the module docstring); rng is a typed or raw PRNG key; accumulate > 1 adds
  the empty accumulator ("acc"); teacher adds the EMA self-teacher's params ("teacher"), a copy of params."""
  raw = jax.random.key_data(rng) if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key) else rng
  st = {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": tx.init(params),
        "rng": jnp.asarray(raw, jnp.uint32)}
  if accumulate > 1:
    st["acc"] = {"grads": jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), params),
                 "weight": jnp.zeros((), jnp.float32)}
  if teacher:
    st["teacher"] = jax.tree.map(jnp.copy, params)
  return st


def restore_target(init, *args, mesh: jax.sharding.Mesh | None) -> State:
  """Where a restored train state goes on this run's devices, whatever device count saved it: the outputs of
  `init(*args)` (e.g. `init_state` over the placed params) as ShapeDtypeStructs placed as that fresh state would
  be (compiled, not run: XLA's output shardings; moments follow their params) on `mesh`, or on one device
  with mesh None. orbax restores onto these (a checkpoint saved on 8 devices restores on 1, and 1 on 8); without
  them it keeps the saved topology and refuses another ("Topology mismatch").
  """
  shapes = jax.eval_shape(init, *args)
  if mesh is None:
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=one), shapes)
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  on_mesh = lambda sh: sh if isinstance(sh, jax.sharding.NamedSharding) and sh.mesh == mesh else replicated
  placed = jax.jit(init).lower(*args).compile().output_shardings
  return jax.tree.map(lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=on_mesh(sh)), shapes, placed)


class Checkpoints:
  """orbax `CheckpointManager` over `<workdir>/checkpoints`: async saves, the newest `keep` kept.

  Args:
    directory: where the numbered step folders live (created).
    identity: what must match on resume, e.g. {"config_hash": ..., "base_model": sha256}; stored in every
      checkpoint's meta and compared by `restore`.
    keep: how many checkpoints to keep (>= 1).

  A save is never lost to how the program ends: `close` (or leaving a `with Checkpoints(...) as ckpts:` block,
  also on an exception) waits for the saves in flight, and so does the interpreter's exit for an instance with
  saves in flight that nobody waited for (an uncaught error, KeyboardInterrupt or sys.exit right after `save`
  still ends with that step on disk, no `<step>.orbax-checkpoint-tmp` left). Only SIGKILL or os._exit lose it.
  """

  def __init__(self, directory: str | pathlib.Path, *, identity: dict[str, str], keep: int = 2):
    self.directory = pathlib.Path(directory).absolute()
    self.identity = dict(identity)
    self._manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=True))

  def latest_step(self) -> int | None:
    """The newest saved step, or None."""
    return self._manager.latest_step()

  def save(self, step: int, state: State, meta: dict[str, Any]) -> None:
    """Start an async save of `state` and `meta` (JSON: e.g. the data cursor) at `step`."""
    meta = {**meta, "identity": self.identity}
    _wait_at_exit(self)
    self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                     meta=ocp.args.JsonSave(meta)))

  def restore(self, abstract: State, step: int | None = None) -> tuple[State, dict[str, Any]]:
    """The state (restored against `abstract`, e.g. jax.eval_shape of init_state; None: plain arrays and
    dicts) and meta of `step` (default the latest).

    Raises:
      ValueError: nothing saved, or the checkpoint's identity (config hash, base model) differs from this
        run's (the message names the field and both values).
    """
    step = self.latest_step() if step is None else step
    if step is None:
      raise ValueError(f"no checkpoint under {self.directory}")
    meta = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
    saved = meta.get("identity", {})
    for field, value in self.identity.items():
      if saved.get(field) != value:
        raise ValueError(f"{self.directory} holds checkpoints of another {field} ({saved.get(field)!r}, this run: "
                         f"{value!r}); pass another --workdir or remove the checkpoints to start over")
    got = self._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
    logging_lib.getLogger("absl").info("resumed from %s step %d", self.directory, step)
    return got.state, meta

  def wait(self) -> int | None:
    """Wait for the saves in flight (async) to be complete on disk; the newest complete step, or None."""
    self._manager.wait_until_finished()
    _IN_FLIGHT.discard(self)
    return self._manager.latest_step()

  def close(self) -> None:
    """Wait for pending async saves, then release the manager."""
    self.wait()
    self._manager.close()

  def __enter__(self) -> Checkpoints:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


_IN_FLIGHT: set[Checkpoints] = set()   # instances that saved since their last wait (strong refs: kept alive)
_HOOKED = []


def _wait_at_exit(ckpts: Checkpoints) -> None:
  """Make the interpreter's exit wait for `ckpts`' saves. The hook runs before threads are joined
  (threading's own exit hooks, as concurrent.futures uses): a plain `atexit` hook runs after, when orbax's
  executors refuse the save's last work ("cannot schedule new futures after interpreter shutdown")."""
  _IN_FLIGHT.add(ckpts)
  if not _HOOKED:                       # registered after orbax's executors: threading runs its hooks in reverse
    threading._register_atexit(_wait_in_flight)  # pylint: disable=protected-access
    _HOOKED.append(True)


def _wait_in_flight() -> None:
  for ckpts in list(_IN_FLIGHT):
    ckpts.wait()
