"""Rollouts of a trained checkpoint on held-out questions, as text (what a collapse looks like).

  python benchmarks/show_samples.py --config=configs/validation.py:train \
      --config.train.configuration=self:solution:reverse_kl --workdir=runs/validation/train/solution --n=8

Loads the base student, the run's latest checkpoint (or --step's) (LoRA adapters or params) and samples one rollout for each of
the first --n held-out questions under the evaluation's first key; prints reward, tokens and text per rollout.
(Runs written since samples.jsonl exists hold every step's rollouts already.)
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from ml_collections import config_flags  # pylint: disable=g-import-not-at-top,wrong-import-position

_CONFIG = config_flags.DEFINE_config_file("config", None, "the train config of the run")
_WORKDIR = flags.DEFINE_string("workdir", None, "the run's workdir (holds train/checkpoints)")
_N = flags.DEFINE_integer("n", 8, "held-out questions to sample")
_STEP = flags.DEFINE_integer("step", None, "the checkpoint's step (default: the latest kept)")


def main(_):
  import jax  # pylint: disable=g-import-not-at-top
  from opd_jax.study import environment
  from opd_jax.training import evaluate, lora, loop  # pylint: disable=g-import-not-at-top
  from opd_jax.training import state as state_lib  # pylint: disable=g-import-not-at-top
  config = _CONFIG.value
  t = config.train
  with config.unlocked():
    config.configurations = {"train": t.configuration}
  env = environment.setup(config, cross_ok=False)
  student, task, pool = env.student, env.task, env.task.problems
  out = pathlib.Path(_WORKDIR.value) / "train"
  ckpts = state_lib.Checkpoints(out / "checkpoints", identity={})
  st, _ = ckpts.restore(None, step=_STEP.value)
  ckpts.close()
  scale = t.lora.alpha / t.lora.rank if t.lora.rank > 0 else None
  params = lora.adapt(student.params, st["params"], scale=scale) if scale is not None else st["params"]
  model = dataclasses.replace(student, params=params)
  held = [pool[i] for i in loop.train_and_held_out(len(pool), t.eval_questions, config.seed).held_out][:_N.value]
  keys = evaluate.eval_keys(config.seed, len(held), t.eval_samples).reshape(len(held), t.eval_samples)[:, 0]
  c = config.sampling
  from opd_jax.decode import sampling  # pylint: disable=g-import-not-at-top
  got = sampling.sample(model, [env.chat(task.prompt(p)) for p in held], keys=keys, max_new_tokens=c.max_new_tokens,
                        temperature=c.temperature, top_p=c.top_p, top_k=c.top_k)
  _, texts, rewards = evaluate.grade(model.tokenizer, task, held, got, grade_truncated=config.task.grade_truncated)
  for p, r, n, text in zip(held, rewards, got.lengths, texts):
    print(json.dumps({"question": p.question, "answer": p.answer, "reward": float(r), "tokens": int(n),
                      "text": text}))
  jax.effects_barrier()


if __name__ == "__main__":
  from opd_jax import terminal  # pylint: disable=g-import-not-at-top
  app.run(main, flags_parser=terminal.parse_flags)
