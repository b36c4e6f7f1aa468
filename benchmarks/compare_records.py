"""Compare the records of two study workdirs: the guard for refactors that must not change results.

  python benchmarks/compare_records.py runs/before runs/after [--tol=1e-6]

Rows are matched by their keys (rollouts: question, rollout; tokens: + view and position; nodes: + configuration
and position). Ids, ints, strings and booleans must be equal; floats (also inside per-candidate lists) within
--tol, NaN where NaN. Columns only in the first workdir are listed (a schema change), columns only in the second
are ignored. Prints every difference and the largest float difference per column; exits 1 on any difference.

Two studies of unlike configurations (one adds a configuration, say) are compared on the configurations and
views (teacher x context) both have; the rest is left out and listed first, not counted as a difference. A view
that only one study has changes the other configurations' numbers: candidate sets C(u) join the top-k of every
view, and a node's candidate slots (hence every continuation's draw) widen with it (docs/usage.md, "Extending"),
so their nodes differ; the tokens rows of the shared views stay comparable.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

KEYS = {"rollouts": ["question_id", "rollout_id"],
        "tokens": ["question_id", "rollout_id", "teacher", "context", "position"],
        "nodes": ["question_id", "rollout_id", "config_id", "position"]}
SHARED = {"tokens": ("view", ["teacher", "context"]), "nodes": ("configuration", ["config_id"])}   # compared where both


def _leaves(v) -> list:
  if isinstance(v, (list, tuple, np.ndarray)):
    return [x for e in v for x in _leaves(e)]
  return [v]


def _shared(table: str, x: pd.DataFrame, y: pd.DataFrame, a: str, b: str):
  """x and y restricted to the configurations (nodes) or views (tokens) both have, and a line per side naming
  what was left out."""
  if table not in SHARED:
    return x, y, []
  what, cols = SHARED[table]
  ids = lambda f: set(map(tuple, f[cols].astype(str).to_numpy())) if len(f) else set()
  both = ids(x) & ids(y)
  name = lambda t: ":".join(t)
  left = [f"{table}: {what}s only in {w}, left out: {', '.join(sorted(map(name, only)))}"
          for w, only in ((a, ids(x) - both), (b, ids(y) - both)) if only]
  keep = lambda f: f[[tuple(r) in both for r in f[cols].astype(str).to_numpy()]] if len(f) else f
  return keep(x), keep(y), left


def compare(a: str, b: str, tol: float) -> tuple[list[str], dict, list[str]]:
  """(differences, largest float difference per column, what was left out: configurations or views that only
  one of the two workdirs has)."""
  problems, worst, left_out = [], {}, []
  for table, keys in KEYS.items():
    x, y, left = _shared(table, pd.read_parquet(f"{a}/records/{table}"), pd.read_parquet(f"{b}/records/{table}"),
                         a, b)
    left_out += left
    x, y = x.sort_values(keys).reset_index(drop=True), y.sort_values(keys).reset_index(drop=True)
    if len(x) != len(y):
      problems.append(f"{table}: {len(x)} rows vs {len(y)}")
      continue
    for col in x.columns:
      if col not in y.columns:
        problems.append(f"{table}.{col}: missing in {b}")
        continue
      for i, (u, v) in enumerate(zip(x[col], y[col])):
        u, v = _leaves(u), _leaves(v)
        if len(u) != len(v):
          problems.append(f"{table}.{col} row {i}: {len(u)} values vs {len(v)}")
          continue
        for p, q in zip(u, v):
          if isinstance(p, float) or isinstance(q, float):
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (p, q)):
              problems.append(f"{table}.{col} row {i}: {p!r} vs {q!r}")    # a number against None or text
              continue
            if np.isnan(p) != np.isnan(q) or (not np.isnan(p) and abs(p - q) > tol):
              problems.append(f"{table}.{col} row {i}: {p!r} vs {q!r}")
            if not np.isnan(p) and not np.isnan(q):
              worst[f"{table}.{col}"] = max(worst.get(f"{table}.{col}", 0.0), abs(p - q))
          elif p != q:
            problems.append(f"{table}.{col} row {i}: {p!r} vs {q!r}")
  return problems, worst, left_out


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("before")
  ap.add_argument("after")
  ap.add_argument("--tol", type=float, default=1e-6)
  args = ap.parse_args()
  problems, worst, left_out = compare(args.before, args.after, args.tol)
  for line in left_out:
    print(line)
  if any(line.startswith("tokens:") for line in left_out):
    print("note: a view only one study has widens every node's candidate set C(u) (the top-k of every view), so the "
          "shared configurations' nodes differ too (docs/usage.md, \"Extending\")")
  for line in problems[:50]:
    print(line)
  print(f"{len(problems)} differences; largest float difference: {max(worst.values(), default=0.0):.3g}")
  sys.exit(1 if problems else 0)


if __name__ == "__main__":
  main()
