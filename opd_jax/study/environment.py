"""A study's environment: the models loaded once (`load_model`), the task, the configurations and their views,
the policies and the mesh (`Env`, built by `setup` after the preflight checks); the stages of
`opd_jax/study/questions.py` read it."""
from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax

from opd_jax import models
from opd_jax import terminal
from opd_jax.models import sharding
from opd_jax.study import nodes
from opd_jax.study import preflight
from opd_jax.study import spec as spec_lib
from opd_jax.teachers import contexts
from opd_jax.teachers import cross_view


def load_model(spec: str, config):
  """A model spec: preset, HF folder, .gguf path, "random:<seed>" (config.random_model architecture), or (a
  teacher) "flax:<python.module>:<factory>" returning a `flax_adapter.FlaxTeacher`."""
  if spec.startswith("random:"):
    r = config.random_model
    seed = preflight.random_seed(spec, "model spec")
    tok = models.byte_tokenizer()
    cfg = models.Config(arch=r.arch, vocab_size=len(tok), d_model=r.d_model, n_layers=r.n_layers,
                        n_heads=r.n_heads, n_kv_heads=r.n_kv_heads, head_dim=r.head_dim, d_ff=r.d_ff,
                        qkv_bias=r.arch == "qwen2", qk_norm=r.arch == "qwen3", max_seq_len=r.max_seq_len)
    params = models.init_params(jax.random.key(seed), cfg, scale=r.init_scale)
    return models.with_layout(models.Model(config=cfg, params=params, tokenizer=tok,
                                           stop_ids=(int(tok.eos_token_id),), name=spec, sha256=None,
                                           source="random"))
  if spec.startswith("flax:"):                   # a user's Flax module (models/flax_adapter.py), teachers only
    from opd_jax.models import flax_adapter  # pylint: disable=g-import-not-at-top
    return flax_adapter.load(spec)
  return models.load(spec, dtype=config.student.dtype or None)


@dataclasses.dataclass
class Env:
  """Everything a question needs: config, task, parsed configurations and loaded models."""
  config: Any
  task: Any
  confs: list
  student: Any
  teachers: dict
  timings: dict
  mesh: Any = None                       # this process's ("data", "model") mesh; params are placed on it
  cross: frozenset = frozenset()         # teachers read through text (`cross.py`): another tokenizer, or forced
  work: dict = dataclasses.field(default_factory=dict)   # what this session spent (`count`; manifest "work")
  chat_settings: contexts.Chat = contexts.Chat()         # config.chat resolved (`preflight.chat`)
  spec: spec_lib.Spec | None = None                      # what the question stages read (`spec.resolve`)

  def count(self, **amounts) -> None:
    for k, v in amounts.items():
      self.work[k] = self.work.get(k, 0) + int(v)

  def teacher(self, name: str):
    return self.student if name == contexts.SELF else self.teachers[name]

  def is_cross(self, view: nodes.View) -> bool:
    return view[0] in self.cross

  def chat(self, message: str) -> list[int]:
    return contexts.study_chat(self.student.tokenizer, message, self.chat_settings)


def views_of(env: Env) -> list[nodes.View]:
  """The study's views, sorted: the (teacher, context) pairs of its configurations, each scored once."""
  return sorted({conf.scoring_key for conf in env.confs})


def candidate_rule(env: Env) -> dict:
  """The study's candidate-set rule (`nodes.candidate_rule`; manifest.json "candidate_set"): its views that add a
  top-k to C(u), i.e. all but the cross-tokenizer ones, and the budget's top-k sizes."""
  b = env.spec.budget
  return nodes.candidate_rule([view for view in views_of(env) if not env.is_cross(view)],
                              student_top_k=b.student_top_k, teacher_top_k=b.teacher_top_k)


def setup(config, task=None, confs=None, *, cross_ok: bool = True) -> Env:
  """Validate, load the task (unless given, with its parsed configurations: `preflight.check`) and every model, check
  tokenizers and context lengths (clear errors before any work)."""
  t0 = time.time()
  if task is None:
    task, confs = preflight.check(config)
  with terminal.bar("loading models"):
    student = load_model(config.student.name, config)
    teachers, cross_names = {}, set()
    for c in confs:
      if c.teacher != contexts.SELF and c.teacher not in teachers:
        teachers[c.teacher] = load_model(c.teacher, config)
        if cross_view.cross_teacher(config, c.teacher, student.tokenizer, teachers[c.teacher].tokenizer,  # as loaded
                                    where=f"config.configurations[{c.config_id!r}]: teacher {c.teacher!r}",
                                    cross_ok=cross_ok):
          cross_names.add(c.teacher)
  mesh = preflight.mesh(config)
  rules = preflight.mesh_rules(config)
  student = sharding.shard_model(student, mesh, rules)
  teachers = {name: sharding.shard_model(m, mesh, rules) for name, m in teachers.items()}
  env = Env(config, task, confs, student, teachers, {"load_s": time.time() - t0}, mesh, frozenset(cross_names),
            chat_settings=preflight.chat(config), spec=spec_lib.resolve(config))
  limits = {contexts.SELF: student.config.max_seq_len, **{k: m.config.max_seq_len for k, m in teachers.items()}}
  preflight.check_context(config, task, confs, student.tokenizer, limits)
  return env
