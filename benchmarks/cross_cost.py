"""A cross-tokenizer view's teacher cost against a shared-tokenizer view's, side by side (issue 28's target).

  python benchmarks/cross_cost.py --study=<finished default study workdir> [--questions=4] [--repeats=3]

On a finished study's rollouts and nodes (the default `configs/teacher_sweep.py`: 0.5B student, the 1.5B
external teacher), the same teacher through both paths:
  shared  what the study runs for a view today: `scoring.score` with the student's hidden states reused (the
          teacher's pass over [context; response], both heads, the predictors) and `nodes.at_nodes`;
  cross   what it runs for a cross-tokenizer view: the student's head (`scoring.score`, self, reused hidden
          states), `nodes.at_nodes` for the student and `cross.candidate_logprobs` (the teacher's pass over its
          tokens of the response, the branches at every position's boundary, the heads at every state), in
          both modes.
Per question, warm (each compiled shape run once first), best of --repeats; ratio = cross / shared.
Prints one table and the counts of teacher states and branch tokens.
"""
import argparse
import json
import pathlib
import time

import pandas as pd

from opd_jax.teachers import cross
from opd_jax import models
from opd_jax.study import nodes
from opd_jax.decode import sampling
from opd_jax.decode import scoring


def _best(fn, repeats):
  fn()                                                      # compile
  out = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    out.append(time.perf_counter() - t0)
  return min(out)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--study", required=True)
  ap.add_argument("--teacher", default="qwen2.5-coder-1.5b-instruct")
  ap.add_argument("--config_id", default="external")
  ap.add_argument("--questions", type=int, default=4)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--prune", type=float, default=10.0, help="exact mode: nats below the canonical path")
  a = ap.parse_args()
  study = pathlib.Path(a.study)
  cfg = json.loads((study / "config.json").read_text())
  student, teacher = models.load(cfg["student"]["name"]), models.load(a.teacher)
  roll = pd.read_parquet(study / "records" / "rollouts")
  nd = pd.read_parquet(study / "records" / "nodes")
  nd = nd[nd.config_id == a.config_id]
  view = ("t", "plain")
  rows = []
  for qid in sorted(nd.question_id.unique())[:a.questions]:
    q = nd[nd.question_id == qid]
    rids = sorted(q.rollout_id.unique())
    r = roll[roll.question_id == qid].set_index("rollout_id")
    prompts = [list(r.loc[i, "prompt_ids"]) for i in rids]
    resp = [list(r.loc[i, "response_ids"]) for i in rids]
    pos = [sorted(q[q.rollout_id == i].position.unique().tolist()) for i in rids]
    h_p = scoring.score(student, student, prompts, prompts, resp, return_hidden=True)["h_p"]
    tp = sampling.SamplingParams()

    def shared():
      got = scoring.score(student, teacher, prompts, prompts, resp, return_hidden=True, student_hidden=h_p)
      ins = [nodes.NodeInputs(h_p[i], {view: (teacher, got["h_q"][i])}, resp[i], pos[i]) for i in range(len(rids))]
      return nodes.at_nodes(student, ins, [view], student_top_k=2, teacher_top_k=1, policy=tp, teacher_policy=tp)

    at = shared()

    def crossed(mode):
      scoring.score(student, student, prompts, prompts, resp, student_hidden=h_p)
      nodes.at_nodes(student, [nodes.NodeInputs(h_p[i], {}, resp[i], pos[i]) for i in range(len(rids))], [],
                     student_top_k=2, teacher_top_k=1, policy=tp, teacher_policy=tp)
      queries = [[(t, [y]) for t, y in enumerate(resp[i])] +           # as `cross_view.score_view` asks
                 [(t, [int(k) for k in at[i].candidates[m] if k >= 0]) for m, t in enumerate(pos[i])]
                 for i in range(len(rids))]
      return cross.candidate_logprobs(student, teacher, prompts, resp, queries, mode=mode, prune=a.prune)

    t_shared = _best(shared, a.repeats)
    t_exact = _best(lambda: crossed("exact"), a.repeats)
    t_canon = _best(lambda: crossed("canonical"), a.repeats)
    res = crossed("exact")
    n_nodes = sum(len(p) for p in pos)
    bound = res.pruned_bound
    rows.append((qid, len(rids), n_nodes, sum(map(len, resp)), t_shared, t_exact, t_canon, res.states,
                 res.branch_tokens, bound))
  print(f"student {cfg['student']['name']}, teacher {a.teacher} through both paths; seconds per question, warm, "
        f"best of {a.repeats}")
  print("| question | rollouts | nodes | response tokens | shared view | cross exact | cross canonical | ratio exact "
        "| ratio canonical | teacher states | branch tokens |")
  print("|---|---|---|---|---|---|---|---|---|---|---|")
  for qid, nr, nn, nt, s, e, c, st, bt, _ in rows:
    print(f"| {qid} | {nr} | {nn} | {nt} | {s:.3f} | {e:.3f} | {c:.3f} | {e / s:.2f} | {c / s:.2f} | {st} | {bt} |")
  s, e, c = (sum(x[i] for x in rows) for i in (4, 5, 6))
  print(f"| all | | {sum(x[2] for x in rows)} | | {s:.3f} | {e:.3f} | {c:.3f} | {e / s:.2f} | {c / s:.2f} | | |")
  print(f"per node: shared {s / sum(x[2] for x in rows):.3f} s, cross exact {e / sum(x[2] for x in rows):.3f} s; "
        f"exact mode pruned at {a.prune} nats: relative error bound <= {max(x[9] for x in rows):.1e}")


if __name__ == "__main__":
  main()
