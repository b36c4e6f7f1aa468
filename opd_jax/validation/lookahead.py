"""One-step lookahead on a study's nodes (issue 13, item 3): a gradient check, and re-runs that say when they
can test a predicted change of a node's value.

`python -m opd_jax.main --config=configs/lookahead.py --config.lookahead.study_workdir=runs/x --workdir=runs/x_la`

At a node u (prefix = prompt + response[:t]) of a finished study and for one configuration c at a time:

  p(θ)   = the student's sampled policy at u restricted to C(u) and renormalised (as the records' p)
  V_u(θ) = Σ_k p_k(θ) P̂_succ(k)                      P̂_succ from the records, held fixed
  L_c(θ) = the registry's divergence of c on C(u): loss(p(θ), q_c) with the recorded q_c on C(u)
  Δθ     = -η ∇θ L_c / |∇θ L_c|   (one SGD step of parameter norm η; lookahead.normalize=False: -η ∇θ L_c)

and reports
  predicted    <∇θ V_u, Δθ>                               first order, `jax.grad` through the student
  (i) local    V_u(θ + Δθ) - V_u(θ)                       the new p' with the same P̂ (no re-run)
  (ii) re-run  Σ_k p'_k P̂'(k) - V_u(θ)                    P̂' from the node's continuations re-run from the
               updated student under the study's keys (common random numbers: replicate r of candidate k at
               node m of rollout i draws from fold_in(fold_in(key(seed), question), 1) and row id
               i * 2^20 + (m K + k) R + r, `targeted.estimate_successes`), so P̂' = P̂ wherever the update changes
               no sampled token, and (ii) = (i) exactly there. With its 95% t interval over the R replicates:
               D_r = Σ_k p'_k r'_kr - Σ_k p_k r_kr (replicate r of every candidate, paired by its keys), (ii) =
               mean_r D_r (`lookahead_summary.rerun_interval`).

What it shows, and what not (issue 25, item 7):
  - "gradient check" (predicted vs (i)): both use the same P̂ and the same Δθ; at a small η their signs agree by
    Taylor's theorem whenever the code is right. It confirms the gradient code (∇θ V and the step); it is no
    evidence that a distillation step raises the node's true value.
  - predicted vs (ii): a test of the prediction only where the re-run changed a reward (elsewhere (ii) = (i)
    exactly, so agreement there repeats the gradient check) and (ii)'s interval is narrower than |predicted|;
    elsewhere the re-run cannot tell the sign, and summary.md says how many re-runs test it.
    Every sign agreement comes with its 95% Wilson interval, the chance level 0.5 and a two-sided binomial
    p-value against it (scipy.stats.binomtest).

The loss on C(u) with the recorded q [ours]: the paper's alignment is the cosine of g* and g_D on C(u) with
these q, so a step on this loss is the parameter-space counterpart of exactly what the study scored (its
logit-space cotangent is the registry's direction, `divergences.direction`, as in the study); no teacher is
loaded. The full-vocabulary training loss (training/losses.py) differs by the mass outside C(u).

Trainable parameters: LoRA adapters (training/lora.py; the trainer's default targets, rank and alpha) or, with
lookahead.lora.rank = 0, every student parameter. LoRA is cheaper (gradients of the adapters only) and is what
a first OPD step trains; with B = 0 at init, Δθ lies in the adapters' B factors (∂/∂A = 0 there).

Outputs under <workdir>/lookahead: nodes.csv (one row per node and configuration), summary.csv (one row per
configuration: the gradient check, sign agreements with Wilson intervals and binomial p-values against 0.5,
resolved re-run counts, minutes) and summary.md.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import time
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pandas as pd

from opd_jax import atomic
from opd_jax import claim
from opd_jax import records
from opd_jax import terminal
from opd_jax.decode import sampling
from opd_jax.estimators import divergences
from opd_jax.estimators import gradients
from opd_jax.models import decoder
from opd_jax.study import environment
from opd_jax.study import preflight
from opd_jax.study import runs
from opd_jax.study import targeted
from opd_jax.training import loop
from opd_jax.training import lora
from opd_jax.training import step as step_lib
from opd_jax.validation import lookahead_summary


# ----------------------------------------------------------------------------------------------------------
# The maths at one node (pure, jitted).

def restricted_logp(trainable, base, tokens, pos, col, cands, *, graphdef, lora_scale: float | None,
                    policy: sampling.SamplingParams, vocab_size: int) -> jax.Array:
  """log p(θ) on C(u): the sampled policy's log-probs at the candidates, renormalised there.

  Args:
    trainable: LoRA adapters (`lora.init`) when lora_scale is set, else the student's whole nnx.State.
    base: the frozen student state (LoRA) or None.
    tokens, pos: int32 [1, S] the prefix (a `step.make_batch` row: prompt left-padded, response[:t] after it).
    col: int32 [] the column whose hidden state predicts response token t.
    cands: int32 [K] C(u), -1 padded.
  Returns:
    fp32 [K] log-probs summing (in prob) to 1 over the valid slots; -inf at padding.
  """
  params = lora.adapt(base, trainable, scale=lora_scale) if lora_scale is not None else trainable
  model = decoder.merge(graphdef, params)
  h, _ = model.hidden_states(tokens, pos)
  logits = model.head(h[0, col])[:vocab_size]
  lp = sampling.policy_logprobs(logits, policy)
  valid = cands >= 0
  return jax.nn.log_softmax(jnp.where(valid, lp[jnp.where(valid, cands, 0)], -jnp.inf))


def _vdot(a, b) -> jax.Array:
  return sum(jnp.vdot(x.astype(jnp.float32), y.astype(jnp.float32)) for x, y in zip(jax.tree.leaves(a),
                                                                                    jax.tree.leaves(b)))


@functools.partial(jax.jit, static_argnames=("graphdef", "lora_scale", "policy", "vocab_size", "divergence",
                                             "options", "normalize"))
def lookahead_step(trainable, base, tokens, pos, col, cands, p_succ, q, advantage, eta, *, graphdef,
                   lora_scale, policy, vocab_size, divergence: str, options: tuple, normalize: bool):
  """One SGD step on one node's loss, and the first-order prediction of its value change.

  Args:
    trainable, base, tokens, pos, col, cands: as `restricted_logp`.
    p_succ: fp32 [K] P̂_succ on C(u) (0 at padding), held fixed. q: fp32 [K] the recorded teacher q on C(u).
    advantage: fp32 [] the recorded full-vocabulary log q(y_t) - log p(y_t) (used by sampled-token divergences;
      the sampled token is slot 0 of C(u)).
    eta: fp32 [] the step: its parameter norm (normalize) or the learning rate.
    divergence, options: the registry name and its sorted (param, value) pairs (static).
  Returns:
    (out, new_trainable): out = {"logp", "logp_new": fp32 [K] log p on C(u) before and after; "predicted":
    <∇θ V, Δθ>; "grad_norm": |∇θ L|; "grad_v_norm": |∇θ V|; "cos": cos(∇θ V, -∇θ L) in parameter space;
    "loss", "loss_new": L before and after}.
  """
  f = functools.partial(restricted_logp, base=base, tokens=tokens, pos=pos, col=col, cands=cands,
                        graphdef=graphdef, lora_scale=lora_scale, policy=policy, vocab_size=vocab_size)
  div, opts = divergences.REGISTRY[divergence], dict(options)
  extra = {"sampled_token": jnp.int32(0), "advantage": advantage} if div.sampled else {}
  loss = lambda lp: div.loss(jnp.exp(lp), q, **opts, **extra)
  logp, pull = jax.vjp(f, trainable)
  p = jnp.exp(logp)
  (grad_v,) = pull(gradients.ideal_gradient(p, p_succ))            # ∇θ V = J^T g*
  g_d = divergences.direction(divergence, p, q, **opts, **extra)
  # q = p on C(u) up to the records' fp32 round-off (self:plain), or the clip binds: no step (the study's
  # "zero_distillation_gradient" rule, `gradients.nan_reason`), else the step would follow round-off.
  zero = jnp.linalg.norm(g_d) < jnp.maximum(gradients.NORM_EPS, gradients.DISTILLATION_NOISE * jnp.linalg.norm(p))
  (descent,) = pull(jnp.where(zero, 0.0, g_d))                     # -∇θ L = J^T g_D
  norm, norm_v = jnp.sqrt(_vdot(descent, descent)), jnp.sqrt(_vdot(grad_v, grad_v))
  scale = jnp.where(norm > 0, eta / jnp.maximum(norm, 1e-30), 0.0) if normalize else eta
  delta = jax.tree.map(lambda d: (scale * d).astype(d.dtype), descent)
  new = jax.tree.map(lambda t, d: (t + d).astype(t.dtype), trainable, delta)
  logp_new = f(new)
  out = {"logp": logp, "logp_new": logp_new, "predicted": _vdot(grad_v, delta), "grad_norm": norm,
         "grad_v_norm": norm_v, "cos": _vdot(grad_v, descent) / jnp.maximum(norm * norm_v, 1e-30),
         "loss": loss(logp), "loss_new": loss(logp_new)}
  return out, new


def node_value(logp: np.ndarray, p_succ: np.ndarray) -> float:
  """V = Σ_k p_k P̂(k) in float64 from fp32 log-probs on C(u) (renormalised in float64, as the records' p)."""
  p = np.exp(np.asarray(logp, np.float64))
  return float(np.sum(p / p.sum() * np.asarray(p_succ, np.float64)))


# ----------------------------------------------------------------------------------------------------------
# The study: its config, nodes and models.

def study_config(workdir, defaults: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The config of a finished study (<workdir>/config.json) over `defaults` (the lookahead job's own config,
  configs/base.py's fields: they fill what a study recorded before a field existed), `lookahead` left out.

  Raises:
    ValueError: no config.json there.
  """
  path = pathlib.Path(workdir) / "config.json"
  if not path.is_file():
    raise ValueError(f"config.lookahead.study_workdir={str(workdir)!r} holds no config.json; pass the --workdir of "
                     "a study run (python -m opd_jax.main --config=configs/smoke.py --workdir=...)")
  config = ml_collections.ConfigDict(
      {k: v for k, v in defaults.copy_and_resolve_references().to_dict().items() if k != "lookahead"})

  def put(dst, src):
    for k, v in src.items():
      if isinstance(v, dict) and k in dst and isinstance(dst[k], ml_collections.ConfigDict) and k != "configurations":
        put(dst[k], v)
      else:
        with dst.unlocked():
          dst[k] = v
  put(config, json.loads(path.read_text()))
  return config


@dataclasses.dataclass(frozen=True)
class NodeRef:
  """One study node and what the lookahead needs from its records (arrays over the valid slots of C(u))."""
  question_id: str
  question_index: int
  rollout_id: int
  position: int
  m: int                          # index of the node among its rollout's node positions (its row-id block)
  positions: tuple[int, ...]      # every node position of the rollout, sorted
  correct: bool
  prompt: list[int]
  response: list[int]
  candidates: np.ndarray          # int64 [K'] C(u)
  p: np.ndarray                   # float64 [K'] recorded p
  p_succ: np.ndarray              # float64 [K']
  rewards: list[list[int]]        # per candidate, its recorded 0/1 rewards
  degenerate: bool


def load_nodes(workdir) -> tuple[pd.DataFrame, dict[tuple, NodeRef]]:
  """The study's nodes table and one `NodeRef` per (question_id, rollout_id, position)."""
  nodes, rollouts = records.read_table(workdir, "nodes"), records.read_table(workdir, "rollouts")
  if nodes.empty:
    raise ValueError(f"config.lookahead.study_workdir={str(workdir)!r} has no node records; run the study first")
  ro = {(r.question_id, int(r.rollout_id)): r for r in rollouts.itertuples()}
  refs = {}
  for (qid, rid), g in nodes.groupby(["question_id", "rollout_id"], sort=True):
    positions = tuple(sorted(int(t) for t in g["position"].unique()))
    r = ro[(qid, int(rid))]
    for t in positions:
      row = g[g["position"] == t].iloc[0]
      refs[(qid, int(rid), t)] = NodeRef(
          question_id=qid, question_index=int(r.question_index), rollout_id=int(rid), position=t,
          m=positions.index(t), positions=positions, correct=bool(row["correct"]),
          prompt=[int(x) for x in r.prompt_ids], response=[int(x) for x in r.response_ids],
          candidates=np.asarray(row["candidates"], np.int64), p=np.asarray(row["p"], np.float64),
          p_succ=np.asarray(row["p_succ"], np.float64), rewards=[list(map(int, x)) for x in row["rewards"]],
          degenerate=bool(row["degenerate"]))
  return nodes, refs


def candidate_width(config, confs) -> int:
  """K of the study's padded C(u) (`nodes.at_nodes`): 1 + k_s + k_t x the number of views; the row ids of its
  continuations depend on it."""
  b = config.budget
  return 1 + b.student_top_k + b.teacher_top_k * len({c.scoring_key for c in confs})


def rerun(student, config, task, ref: NodeRef, K: int) -> list[list[int]]:
  """The node's continuations re-run from `student` under the study's keys and row ids: per candidate, the
  0/1 rewards of its R replicates (equal to the records' when `student` is the study's)."""
  b, sp = config.budget, preflight.policy(config)
  problem = task.problems[ref.question_index]
  cands = np.full((len(ref.positions), K), -1, np.int64)
  cands[ref.m, :len(ref.candidates)] = ref.candidates

  def reward(resp, finished):
    return task.rollout_reward(problem, student.tokenizer.decode(resp, skip_special_tokens=True),
                               finished=finished, grade_truncated=config.task.grade_truncated)

  policy = targeted.ModelPolicy(student, batch_size=b.branch_batch, temperature=sp.temperature, top_p=sp.top_p,
                                top_k=sp.top_k)
  key = jax.random.fold_in(jax.random.fold_in(jax.random.key(config.seed), ref.question_index), 1)
  out = targeted.estimate_successes(policy, reward, ref.prompt, [(ref.rollout_id, ref.response,
                                                                  list(ref.positions), cands)],
                                    R=b.continuations_per_candidate, key=key,
                                    max_response_len=config.sampling.max_new_tokens)[0]
  return [out.replicates(ref.m, k).astype(int).tolist() for k in range(len(ref.candidates))]


# ----------------------------------------------------------------------------------------------------------
# The job.

def validate(config) -> None:
  """config.lookahead errors that need no model (and integers out of range: `preflight.check_integers`).

  Raises:
    ValueError: naming the field.
  """
  preflight.check_integers(config.to_dict())
  la = config.lookahead
  if not la.study_workdir:
    raise ValueError("config.lookahead.study_workdir is required: the --workdir of a finished study")
  if not (la.eta > 0):
    raise ValueError(f"config.lookahead.eta must be > 0, got {la.eta!r}")
  for f in ("max_nodes", "rerun_nodes"):
    if isinstance(la[f], bool) or not isinstance(la[f], int) or la[f] < -1:
      raise ValueError(f"config.lookahead.{f} must be an integer >= -1 (-1: all), got {la[f]!r}")
  if la.lora.rank < 0:
    raise ValueError(f"config.lookahead.lora.rank must be >= 0 (0: every parameter), got {la.lora.rank!r}")


def run(config, workdir: str) -> str:
  """The lookahead of config.lookahead over a finished study; returns summary.md's text. Holds `workdir`'s lock
  (`claim.workdir_lock`, as a study and the trainer do) from before the model loads until it returns: a second
  lookahead on the same workdir is refused instead of overwriting the first's tables.

  Raises:
    ValueError: a bad config.lookahead field, another live run in `workdir` (`claim.WorkdirInUse`), no study there,
      an unknown configuration name, or an adaptive or weighted study with re-runs (only uniform continuations are
      re-run).
  """
  validate(config)
  pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
  with claim.workdir_lock(workdir, runs.process_index()):
    return _run(config, workdir)


def _run(config, workdir: str) -> str:
  """`run`'s body, under the workdir's lock."""
  la = config.lookahead
  terminal.ENABLED = bool(config.logging.progress)
  scfg = study_config(la.study_workdir, config)
  task, confs = preflight.check(scfg)
  wanted = list(la.configurations) or [c.config_id for c in confs]
  unknown = sorted(set(wanted) - {c.config_id for c in confs})
  if unknown:
    raise ValueError(f"config.lookahead.configurations names {unknown}, not configurations of the study "
                     f"({[c.config_id for c in confs]})")
  if la.rerun_nodes and preflight.allocation(scfg) != "uniform":
    raise ValueError(f"config.lookahead.rerun_nodes: the study used {preflight.allocation(scfg)} continuations; "
                     "re-runs support uniform ones only: set config.lookahead.rerun_nodes=0")
  frame_nodes, refs = load_nodes(la.study_workdir)
  K = candidate_width(scfg, confs)
  env = environment.setup(scfg, task, [])                   # the student only: q comes from the records
  student, policy = env.student, preflight.policy(scfg)
  base = student.params
  scale = la.lora.alpha / la.lora.rank if la.lora.rank > 0 else None
  trainable = (lora.init(base, jax.random.fold_in(jax.random.key(la.seed), 1), rank=la.lora.rank,
                         pattern=la.lora.targets) if scale is not None else base)
  adapted = jax.jit(lambda b, a: lora.adapt(b, a, scale=scale)) if scale is not None else None
  step_kw = dict(graphdef=student.graphdef, lora_scale=scale, policy=policy,
                 vocab_size=student.config.real_vocab_size, normalize=bool(la.normalize))
  out_dir = pathlib.Path(workdir) / "lookahead"
  out_dir.mkdir(parents=True, exist_ok=True)
  rows = []
  by_conf = {c.config_id: c for c in confs}
  for cid in wanted:
    conf = by_conf[cid]
    sub = frame_nodes[(frame_nodes["config_id"] == cid) & (frame_nodes["q"].map(len) > 0)]
    sub = sub.sort_values(["question_id", "rollout_id", "position"])
    if la.max_nodes >= 0:
      sub = sub.iloc[:la.max_nodes]
    with terminal.bar(f"lookahead {cid}", total=len(sub), unit="node") as bar:
      for i, row in enumerate(sub.itertuples()):
        ref = refs[(row.question_id, int(row.rollout_id), int(row.position))]
        t0 = time.time()
        out, new = node_step(student, trainable, base, ref, K, np.asarray(row.q, np.float64),
                             float(row.sampled_advantage), conf, la.eta, **step_kw)
        p_new, p_now = out.pop("p_new"), out.pop("p_now")
        rec = {"question_id": ref.question_id, "rollout_id": ref.rollout_id, "position": ref.position,
               "config_id": cid, "divergence": loop.divergence_spec(conf), "correct": ref.correct,
               "degenerate": ref.degenerate, "alignment": float(row.alignment), "value_recorded": float(row.value),
               **out, "seconds": time.time() - t0, "rerun": np.nan, "rerun_downstream": np.nan,
               "rewards_changed": np.nan, "rerun_seconds": np.nan, "rerun_lo": np.nan, "rerun_hi": np.nan,
               "rerun_halfwidth": np.nan, "rerun_R": 0}
        if la.rerun_nodes < 0 or i < la.rerun_nodes:
          t1 = time.time()
          model = dataclasses.replace(student, params=adapted(base, new) if adapted else new)
          got = rerun(model, scfg, task, ref, K)
          ps = np.array([np.mean(x) if x else 0.0 for x in got])
          rec["rerun"] = float(np.sum(p_new * ps)) - rec["value"]               # (ii)
          rec["rerun_downstream"] = float(np.sum(p_new * (ps - ref.p_succ)))      # (ii) - (i)
          rec.update({k: v for k, v in lookahead_summary.rerun_interval(p_now, p_new, ref.rewards, got).items()
                      if k != "rerun_mean"})
          rec["rewards_changed"] = int(sum(a != b for x, y in zip(got, ref.rewards) for a, b in zip(x, y)))
          rec["rerun_seconds"] = time.time() - t1
        rows.append(rec)
        bar.update(1)
    text = _write(config, out_dir, pd.DataFrame(rows))        # after each configuration: partial runs keep results
  return text


def _write(config, out_dir: pathlib.Path, frame: pd.DataFrame) -> str:
  summary = lookahead_summary.summarise(frame)
  atomic.write_bytes(out_dir / "nodes.csv", frame.to_csv(index=False))
  atomic.write_bytes(out_dir / "summary.csv", summary.to_csv(index=False))
  text = lookahead_summary.summary_text(config, summary, frame)
  atomic.write_bytes(out_dir / "summary.md", text)
  return text


def node_step(student, trainable, base, ref: NodeRef, K: int, q: np.ndarray, advantage: float, conf, eta: float,
              **step_kw) -> tuple[dict[str, Any], Any]:
  """`lookahead_step` at one node for one configuration; returns (row fields, new trainable).

  Row fields: value (V(θ) recomputed), local ((i) = V(θ + Δθ) - V(θ)), predicted, grad_norm, grad_v_norm, cos,
  loss, loss_new, p_max_diff (max |p(θ) - recorded p|: the prefix check), "p_new" and "p_now" (float64 [K'] p'
  and p(θ), renormalised). "predicted" is the first-order term: against "local" it is a gradient check.
  """
  batch = step_lib.make_batch([ref.prompt], [ref.prompt], [ref.response[:ref.position]])
  col = batch.tokens_s.shape[1] - batch.response.shape[1] - 1 + ref.position
  n = len(ref.candidates)
  pad = lambda x, fill: np.concatenate([np.asarray(x), np.full(K - n, fill, np.asarray(x).dtype)])
  name = conf.divergence
  out, new = lookahead_step(
      trainable, base, jnp.asarray(batch.tokens_s), jnp.asarray(batch.pos_s), jnp.int32(col),
      jnp.asarray(pad(ref.candidates, -1), jnp.int32), jnp.asarray(pad(ref.p_succ, 0.0), jnp.float32),
      jnp.asarray(pad(q, 0.0), jnp.float32), jnp.float32(advantage), jnp.float32(eta), divergence=name,
      options=tuple(sorted(conf.options)), **step_kw)
  out = jax.device_get(out)
  lp, lp_new = out["logp"][:n], out["logp_new"][:n]
  v, v_new = node_value(lp, ref.p_succ), node_value(lp_new, ref.p_succ)
  p_new = np.exp(np.asarray(lp_new, np.float64))
  p = np.exp(np.asarray(lp, np.float64))
  return ({"value": v, "local": v_new - v, "predicted": float(out["predicted"]),
           "grad_norm": float(out["grad_norm"]), "grad_v_norm": float(out["grad_v_norm"]), "cos": float(out["cos"]),
           "loss": float(out["loss"]), "loss_new": float(out["loss_new"]),
           "p_max_diff": float(np.max(np.abs(p / p.sum() - ref.p))), "p_new": p_new / p_new.sum(),
           "p_now": p / p.sum()}, new)
