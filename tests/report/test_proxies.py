"""The report's cheap proxies (opd_jax/report/proxies.py): each configuration's view mean of the per-token
divergences, against numpy, v2's per-question sums (benchmarks/validate_training.predictor_sums' ratio) and the
cluster bootstrap's documented protocol recomputed here."""
import numpy as np
import pandas as pd

from opd_jax.report import proxies


def _frames(seed: int = 0):
  rng = np.random.default_rng(seed)
  views = [("t", "plain"), ("self", "solution")]
  tokens = []
  for q in range(7):
    for teacher, context in views:
      for _ in range(int(rng.integers(3, 9))):
        tokens.append(dict(question_id=f"q{q}", teacher=teacher, context=context, kl_qp=rng.gamma(2.0),
                           kl_pq=rng.gamma(1.5) if rng.random() > 0.1 else np.nan, js=rng.random() * 0.7,
                           topk_overlap=rng.integers(0, 5) / 4))
  nodes = pd.DataFrame([dict(config_id="ext_rkl", teacher="t", context="plain"),
                        dict(config_id="sol_rkl", teacher="self", context="solution"),
                        dict(config_id="sol_fkl", teacher="self", context="solution"),
                        dict(config_id="ghost", teacher="other", context="plain")])
  return pd.DataFrame(tokens), nodes


def test_each_configuration_gets_its_views_token_means_with_question_intervals():
  tokens, nodes = _frames()
  got = proxies.proxy_table(tokens, nodes, n_boot=300, seed=3)
  assert list(dict.fromkeys(got.config_id)) == ["ext_rkl", "sol_rkl", "sol_fkl"]          # ghost: no tokens
  assert list(got.proxy[:4]) == ["minus_kl_qp", "minus_kl_pq", "minus_js", "topk_overlap"]
  for (conf, name), row in got.set_index(["config_id", "proxy"]).iterrows():
    view = nodes.set_index("config_id").loc[conf]
    col, sign = proxies.PROXIES[name]
    sel = tokens[(tokens.teacher == view.teacher) & (tokens.context == view.context)].dropna(subset=[col])
    assert np.isclose(row.value, sign * sel[col].mean(), rtol=1e-13)
    per_q = sel.groupby("question_id")[col].agg(["sum", "count"])                       # v2's ratio of sums
    assert np.isclose(row.value, sign * per_q["sum"].sum() / per_q["count"].sum(), rtol=1e-13)
    assert row.tokens == len(sel) and row.questions == sel.question_id.nunique()
    labels = np.unique(sel.question_id)                                                 # the documented draws
    draws = np.random.default_rng(3).integers(0, len(labels), size=(300, len(labels)))
    s, n = per_q.loc[labels, "sum"].to_numpy(), per_q.loc[labels, "count"].to_numpy()
    reps = sign * s[draws].sum(1) / n[draws].sum(1)
    assert np.allclose([row.ci_lo, row.ci_hi], np.quantile(reps, [0.025, 0.975]), rtol=1e-12)
  same = got[got.config_id == "sol_rkl"].drop(columns="config_id").reset_index(drop=True)
  assert same.equals(got[got.config_id == "sol_fkl"].drop(columns="config_id").reset_index(drop=True))
  header, rows = proxies.wide(got)
  assert header == ["config", "view", "tokens", *proxies.PROXIES] and [r[0] for r in rows] == ["ext_rkl", "sol_rkl",
                                                                                              "sol_fkl"]
  first = got.iloc[0]
  assert rows[0][3] == f"{first.value:+.3f} [{first.ci_lo:+.3f}, {first.ci_hi:+.3f}]"
  assert proxies.proxy_table(tokens.iloc[:0], nodes).empty


def test_infinite_values_are_left_out_and_a_view_without_finite_values_has_no_rows():
  """An infinite KL is left out of the mean (as v2's sums leave it), and a view whose proxies are all NaN (a
  cross-tokenizer teacher: no per-token divergences) gets no rows rather than NaN ones."""
  tokens, nodes = _frames(1)
  tokens.loc[tokens.index[0], "kl_qp"] = np.inf
  cross = tokens[tokens.teacher == "t"].assign(teacher="other", kl_qp=np.nan, kl_pq=np.nan, js=np.nan,
                                               topk_overlap=np.nan)
  got = proxies.proxy_table(pd.concat([tokens, cross]), nodes, n_boot=50)
  assert "ghost" not in set(got.config_id)
  row = got[(got.config_id == "ext_rkl") & (got.proxy == "minus_kl_qp")].iloc[0]
  view = tokens[(tokens.teacher == "t") & np.isfinite(tokens.kl_qp)]
  assert np.isclose(row.value, -view.kl_qp.mean()) and row.tokens == len(view) and np.isfinite([row.ci_lo, row.ci_hi]).all()
