"""How far the canonical-tokens q is from the exact (every tokenization) q, on a finished study's real nodes.

  python benchmarks/cross_modes.py --study=<workdir of configs/cross_tokenizer.py[:reverse]> --config_id=smollm2

For each node of the configuration (a cross-tokenizer view), q on the recorded C(u) is recomputed in both modes
(`cross.candidate_logprobs`); the exact one is checked against the records (the study's own numbers), then
canonical against exact: |q_canonical - q_exact| per candidate (after renormalising over C(u)), the mass the
candidates cover in each mode, and the alignment and teacher advantage recomputed from the records' p and
successes with each q (`success.node_estimates`): their differences and how often alignment's sign flips.
Loads the student and that teacher only.
"""
import argparse
import json
import pathlib
import time

import ml_collections
import numpy as np
import pandas as pd

from opd_jax.teachers import contexts
from opd_jax.teachers import cross
from opd_jax.estimators import success
from opd_jax.study import environment
from opd_jax.study import preflight


def _renorm(logq):
  q = np.exp(np.asarray(logq, np.float64) - np.max(logq))
  return q / q.sum()


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--study", required=True)
  ap.add_argument("--config_id", required=True)
  a = ap.parse_args()
  wd = pathlib.Path(a.study)
  config = ml_collections.ConfigDict(json.loads((wd / "config.json").read_text()))
  task, confs = preflight.check(config)
  conf = next(c for c in confs if c.config_id == a.config_id)
  student, teacher = environment.load_model(config.student.name, config), environment.load_model(conf.teacher, config)
  t_q = preflight.teacher_policy(config).temperature
  roll = pd.read_parquet(wd / "records" / "rollouts")
  nd = pd.read_parquet(wd / "records" / "nodes")
  nd = nd[(nd.config_id == a.config_id) & nd.q.map(len).gt(0)]
  out = {m: [] for m in ("exact", "canonical")}
  seconds = {m: 0.0 for m in out}
  for qid, q in nd.groupby("question_id"):
    r = roll[roll.question_id == qid].set_index("rollout_id")
    problem = task.problems[int(r.question_index.iloc[0])]
    rids = sorted(q.rollout_id.unique())
    msg = contexts.context_message(conf.context, task, problem, templates=config.contexts.templates)
    prompts = [contexts.study_chat(teacher.tokenizer, msg, preflight.chat(config))] * len(rids)
    resp = [list(r.loc[i, "response_ids"]) for i in rids]
    queries = [[(int(x.position), list(x.candidates)) for x in q[q.rollout_id == i].itertuples()] for i in rids]
    for mode in out:
      t0 = time.perf_counter()
      got = cross.candidate_logprobs(student, teacher, prompts, resp, queries, temperatures=(t_q,), mode=mode)
      seconds[mode] += time.perf_counter() - t0
      for i, rid in enumerate(rids):
        for j, x in enumerate(q[q.rollout_id == rid].itertuples()):
          logq = got.logq[i][j][0]
          out[mode].append(dict(question_id=qid, rollout_id=rid, position=x.position, q=_renorm(logq),
                                mass=float(np.exp(np.logaddexp.reduce(logq))), rec_q=np.asarray(x.q),
                                p=np.asarray(x.p), succ=np.asarray(x.successes), n=np.asarray(x.n),
                                divergence=x.divergence))
  ex, ca = out["exact"], out["canonical"]
  rec_err = max(float(np.max(np.abs(e["q"] - e["rec_q"]))) for e in ex)
  dq = np.concatenate([np.abs(c["q"] - e["q"]) for e, c in zip(ex, ca)])

  def est(rows):
    res = []
    for e in rows:
      k = len(e["p"])
      if k < 2:
        res.append((np.nan, np.nan))
        continue
      o = success.node_estimates(e["p"][None], e["q"][None], e["succ"][None], e["n"][None],
                                  divergence=e["divergence"], sampled_index=np.zeros(1, np.int64),
                                  advantage=np.zeros(1))
      res.append((float(o.alignment[0]), float(o.teacher_advantage[0])))
    return np.array(res)

  ae, ac = est(ex), est(ca)
  both = ~np.isnan(ae[:, 0]) & ~np.isnan(ac[:, 0])
  flips = int(np.sum(np.sign(ae[both, 0]) != np.sign(ac[both, 0])))
  print(f"study {wd} config {a.config_id} ({conf.teacher}); student {config.student.name}; {len(ex)} nodes, "
        f"{dq.size} candidates")
  print(f"exact q recomputed vs the records: max |diff| {rec_err:.2e}")
  print(f"|q_canonical - q_exact| per candidate: median {np.median(dq):.2e}, 90th pct {np.quantile(dq, 0.9):.2e}, "
        f"max {dq.max():.2e}; candidates with |diff| > 0.01: {int((dq > 0.01).sum())} of {dq.size}")
  me, mc = np.array([e["mass"] for e in ex]), np.array([c["mass"] for c in ca])
  print(f"mass on C(u): exact median {np.median(me):.4f} (min {me.min():.4f}), canonical median {np.median(mc):.4f} "
        f"(min {mc.min():.4f})")
  da = np.abs(ae[both, 0] - ac[both, 0])
  dt = np.abs(ae[both, 1] - ac[both, 1])
  print(f"alignment (nodes defined in both: {int(both.sum())}): mean exact {np.mean(ae[both, 0]):+.4f}, canonical "
        f"{np.mean(ac[both, 0]):+.4f}; |diff| median {np.median(da):.2e}, max {da.max():.2e}; sign flips {flips}")
  print(f"teacher advantage |diff|: median {np.median(dt):.2e}, max {dt.max():.2e}")
  print(f"teacher seconds (all nodes, only the node queries): exact {seconds['exact']:.1f}, canonical "
        f"{seconds['canonical']:.1f}")


if __name__ == "__main__":
  main()
