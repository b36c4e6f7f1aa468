"""A study's views whose teacher reads text (another tokenizer than the student's): which teachers, and their
records (`cross.py` computes the teacher's probabilities).

`cross_teacher` decides, per teacher, on ids (`models.tokenizer_differences`) or config.scoring.cross_tokenizer.
force, and refuses what the text path cannot do; `score_view` fills a question's dense records and q at the
nodes for one such view, after the nodes are chosen (`questions.nodes_of`).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from absl import logging

from opd_jax import models
from opd_jax import records
from opd_jax.estimators import predictors
from opd_jax.models import token_bytes
from opd_jax.teachers import cross

_CROSS: dict[tuple[str, str, bool], bool] = {}   # (student spec, teacher spec, force) -> reads text (`cross_teacher`)


def cross_teacher(config, spec: str, student_tokenizer, teacher_tokenizer, *, where: str,
                  cross_ok: bool = True) -> bool:
  """Whether a teacher reads other ids than the student (a cross-tokenizer teacher: `cross.py`), decided on ids
  (`models.tokenizer_differences`) or forced by config.scoring.cross_tokenizer.force (the identity check).

  A teacher whose tokenizer normalizes text (Qwen2.5: NFC) passes, and says so in the log: the text it would
  change is never given to it to read (`cross.py`: such nodes get no q, with a reason), and its tokenizer
  without the normalizer must write any text back (`token_bytes.byte_vocab` checks).

  Raises:
    ValueError: the tokenizers differ where only the student's ids can serve (cross_ok False: the trainer,
      whose loss sums over one vocabulary; a "flax:" teacher), or a tokenizer is not byte-level BPE
      (`token_bytes.byte_vocab`); one line naming `where` and what differs.
  """
  diff = models.tokenizer_difference(student_tokenizer, teacher_tokenizer)
  _CROSS[_key(config, spec)] = diff is not None or config.scoring.cross_tokenizer.force
  if diff is None and not config.scoring.cross_tokenizer.force:
    return False
  what = diff or "config.scoring.cross_tokenizer.force is set"
  if not cross_ok or spec.startswith("flax:"):
    job = "the trainer's loss (a sum over one vocabulary)" if not cross_ok else "a flax: teacher"
    raise ValueError(f"{where}: student and teacher must share the tokenizer for {job}: {what}. Teachers of "
                     "another tokenizer are supported by the study (job 'study', HF folders, GGUF files and "
                     "presets), not here")
  for name, tok in (("student", student_tokenizer), ("teacher", teacher_tokenizer)):
    try:
      vocab = token_bytes.byte_vocab(tok)
    except ValueError as e:
      raise ValueError(f"{where}: the teacher reads other ids than the student ({what}), and the {name}'s "
                       f"tokenizer cannot be read by bytes: {e}") from None
  if vocab.raw is not None:                    # the teacher's (`cross.py`, module docstring)
    logging.info("%s: the teacher's tokenizer normalizes text (%s): a node whose text before its boundary is "
                 "text it changes gets no q (alignment_nan_reason %r)", where,
                 type(teacher_tokenizer.backend_tokenizer.normalizer).__name__, records.TEACHER_NORMALIZES_TEXT)
  return True


def _key(config, teacher: str) -> tuple[str, str, bool]:
  return config.student.name, teacher, bool(config.scoring.cross_tokenizer.force)


def checked(config, teacher: str) -> bool:
  """Whether `cross_teacher` has decided this teacher of this config's student."""
  return _key(config, teacher) in _CROSS


def reads_text(config, teacher: str) -> bool:
  """Whether `cross_teacher` found that this teacher of this config reads text (False if not checked yet)."""
  return bool(_CROSS.get(_key(config, teacher)))


# ----------------------------------------------------------------------------------------------------------
# A study's cross-tokenizer view: its dense records and its q at the nodes.

# Dense predictors of a view that reads text: those whose registry entry says how (`Predictor.on_text`: entropy_p,
# the student's alone; logq_minus_logp, of the sampled token's text). Every other predictor compares two
# distributions over one vocabulary and is undefined across tokenizers (NaN in the view's `tokens` rows;
# records.CONVENTIONS["cross-tokenizer view"]): a registered predictor is undefined here unless it says otherwise,
# never the student's value by mistake (`score_view`).


def pending(teacher_prompt: Sequence[int]) -> dict:
  """What the study keeps of a cross view's rollout until its nodes are known: the teacher's prompt ids."""
  return {"t_prompt": list(teacher_prompt), "h_q": None}


def score_view(student: Any, teacher: Any, view, responses, dense: dict, at: dict, *, options,
               teacher_temperature: float) -> cross.Result | None:
  """Fill one cross view's records of a question in place: dense[view][r] "logq" (raw, T = 1: log q of the
  sampled token's text at every position), each predictor by its `on_text` (NaN without one); at[r].q_at[view] (the
  scaled teacher's log q on C(u), config's teacher temperature; None where the view has no context) and
  at[r].q_reason[view] (per node, "" or why its q are NaN: `cross.Result.reasons`).

  Args:
    dense: {view: {rollout: arrays}} of `questions.score_views` (the view's rows hold `pending` and the student's
      logp); at: {rollout: nodes.RolloutNodes} of the node rollouts; options: config.scoring.cross_tokenizer;
      teacher_temperature: T_q of the scaled teacher at the nodes (`preflight.teacher_policy`).
  """
  xt, t_q = options, float(teacher_temperature)
  temps = (1.0,) if t_q == 1.0 else (1.0, t_q)
  rows = sorted(dense[view])
  for a in at.values():
    a.q_at[view] = None
  if not rows:
    return None
  # Per rollout: the sampled token alone at every position (its q does not depend on a candidate set), then
  # each node's C(u) (their events made disjoint together); the strings they share are summed once.
  queries = []
  for r in rows:
    node = at.get(r)
    queries.append([(t, [int(y)]) for t, y in enumerate(responses[r])] +
                   ([] if node is None else [(int(t), [int(k) for k in c if k >= 0])
                                             for t, c in zip(node.positions, node.candidates)]))
  res = cross.candidate_logprobs(student, teacher, [dense[view][r]["t_prompt"] for r in rows],
                                 [responses[r] for r in rows], queries, temperatures=temps, mode=xt.mode,
                                 max_tree_nodes=xt.max_tree_nodes, prune=float(xt.prune))
  logging.info("cross-tokenizer view %s: %d teacher states, %d branch rows, %d candidates over the state bound, "
               "%d positions after text the teacher's normalizer changes, pruning's relative error <= %.1e, q "
               "clipped into [0, 1] by <= %.1e", "/".join(view), res.states, res.branch_rows, res.too_many,
               res.normalized, res.pruned_bound, res.clipped)
  for i, r in enumerate(rows):
    d = dense[view][r]
    L = len(responses[r])
    logq = np.array([q[0, 0] for q in res.logq[i][:L]], np.float64)
    d["logq"] = logq.astype(np.float32)
    logp = np.asarray(d["logp"], np.float64)
    for k, pred in predictors.REGISTRY.items():
      d[k] = (np.full(len(logq), np.nan) if pred.on_text is None else
              np.asarray(pred.on_text(logp, logq, np.asarray(d[k], np.float64)), np.float64)).astype(np.float32)
    node = at.get(r)
    if node is not None:
      q_at = np.full(node.candidates.shape, -np.inf, np.float64)
      for m in range(len(node.positions)):
        vals = res.logq[i][L + m][-1]
        q_at[m, :len(vals)] = vals
      node.q_at[view] = q_at
      node.q_reason[view] = res.reasons[i][L:]
  return res
