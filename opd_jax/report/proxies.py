"""The cheap proxies of each configuration: per-token divergences between the student's p and the view's q, which
need no targeted rollouts (issue 47, item 6). Validation v2 tests them against the training gains beside the
alignment (docs/data/validation_v2/hypothesis.md, secondary 2; the verdict's basis line reads the result).

A configuration's proxy is its view's (teacher x context) mean per-token value over the study's scored rollouts'
tokens (the tokens table: the node rollouts, balanced correct / incorrect, unless scoring.all_rollouts scores every
rollout), over the finite values (a cross-tokenizer view has none: its proxies are left out), signed so that higher
means the teacher is
closer to the student: -KL(q || p), -KL(p || q), -JS and top-k overlap, v2's `minus_kl_qp`, `minus_kl_pq`,
`minus_js` and `topk_overlap` (benchmarks/validate_training.py `predictor_sums`: the ratio of per-question sums over
the questions, the same number). Its interval resamples questions (stats.cluster_bootstrap_ci, mean of the drawn
questions' tokens). Configurations of one view share their proxies: a divergence is not seen by them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from opd_jax.estimators import stats

# v2's name -> (the tokens table's column, sign): higher = the teacher closer to the student.
PROXIES = {"minus_kl_qp": ("kl_qp", -1.0), "minus_kl_pq": ("kl_pq", -1.0), "minus_js": ("js", -1.0),
           "topk_overlap": ("topk_overlap", 1.0)}
COLUMNS = ("question_id", "teacher", "context", *dict.fromkeys(c for c, _ in PROXIES.values()))
NOTE = ("A configuration's view (teacher x context), its mean per token over the scored rollouts (the node rollouts "
        "unless scoring.all_rollouts): -KL(q||p), "
        "-KL(p||q), -JS and top-k overlap, higher = the teacher closer to the student; no targeted rollouts, so "
        "cheap, and blind to the divergence (configurations of one view share them). Validation v2 tests whether "
        "they rank training gains within a teacher, beside the alignment (the verdict's first validation line).")


def proxy_table(tokens: pd.DataFrame, nodes: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0,
                level: float = 0.95) -> pd.DataFrame:
  """Each configuration's cheap proxies with cluster-bootstrap intervals over questions.

  Args:
    tokens: the tokens table (records "tokens": question_id, teacher, context and the predictor columns of
      PROXIES), one row per scored token and view.
    nodes: node records (config_id, teacher, context): which view each configuration reads.
    n_boot, seed, level: the intervals (stats.cluster_bootstrap_ci).
  Returns:
    One row per configuration (nodes' order) and proxy (PROXIES' order): config_id, teacher, context, proxy, value,
    ci_lo, ci_hi, tokens (with a finite value), questions; no rows for a view without tokens, nor for a proxy
    without a finite value there (a column the table lacks, a cross-tokenizer view).
  """
  views = nodes.drop_duplicates("config_id")[["config_id", "teacher", "context"]]
  q = tokens["question_id"].astype(str).to_numpy()
  teachers, contexts = tokens["teacher"].astype(str).to_numpy(), tokens["context"].astype(str).to_numpy()
  per_view = {}                                     # (teacher, context) -> its rows (configurations share a view)
  rows = []
  for conf, teacher, context in views.itertuples(index=False):
    key = (str(teacher), str(context))
    if key not in per_view:
      per_view[key] = _view_rows(tokens, q, (teachers == key[0]) & (contexts == key[1]), n_boot, seed, level)
    rows += [dict(config_id=conf, teacher=teacher, context=context, **r) for r in per_view[key]]
  return pd.DataFrame(rows, columns=["config_id", "teacher", "context", "proxy", "value", "ci_lo", "ci_hi", "tokens",
                                     "questions"])


def _view_rows(tokens: pd.DataFrame, q: np.ndarray, sel: np.ndarray, n_boot: int, seed: int, level: float) -> list:
  """proxy_table's rows of one view (`sel`: its tokens): non-finite values (an infinite KL) are left out, as v2's
  per-question sums leave them."""
  out = []
  for name, (col, sign) in PROXIES.items():
    if col not in tokens.columns or not sel.any():
      continue
    v = sign * tokens[col].to_numpy(np.float64)[sel]
    ok = np.isfinite(v)
    if not ok.any():
      continue
    value, lo, hi = stats.cluster_bootstrap_ci(np.where(ok, v, np.nan), q[sel], n_boot=n_boot, level=level, seed=seed)
    out.append(dict(proxy=name, value=value, ci_lo=lo, ci_hi=hi, tokens=int(ok.sum()),
                    questions=len(np.unique(q[sel][ok]))))
  return out


def wide(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
  """(header, rows) of `proxy_table` with one row per configuration and "value [lo, hi]" per proxy, for the
  summary's and the page's tables."""
  names = [p for p in PROXIES if p in set(table["proxy"])]
  rows = []
  for conf, g in table.groupby("config_id", sort=False):
    by = g.set_index("proxy")
    rows.append([str(conf), f"{g['teacher'].iloc[0]}:{g['context'].iloc[0]}", str(int(g["tokens"].max())),
                 *(f"{by.at[p, 'value']:+.3f} [{by.at[p, 'ci_lo']:+.3f}, {by.at[p, 'ci_hi']:+.3f}]"
                   if p in by.index else "n/a" for p in names)])
  return ["config", "view", "tokens", *names], rows
