"""One-step lookahead (training/lookahead.py): the first-order identity and the local change (i) against numpy (a
gradient check), the re-run's paired interval against scipy, and the summary's wording and intervals."""
import dataclasses
import json
import os
import socket

import jax
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from configs import lookahead as cfg_lookahead
from opd_jax.teachers import contexts
from opd_jax import claim
from opd_jax import models
from opd_jax.decode import sampling
from opd_jax.estimators import success
from opd_jax.validation import lookahead
from opd_jax.validation import lookahead_summary
from opd_jax.training import lora


CFG = models.Config(arch="qwen2", vocab_size=48, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                    d_ff=64, qkv_bias=True)


@pytest.fixture(scope="module")
def setup():
  student = models.random_model(CFG, seed=0, layout="stacked")
  base = student.params
  adapters = lora.init(base, jax.random.key(3), rank=4)
  rng = np.random.default_rng(0)
  prompt, response = rng.integers(3, 48, 9).tolist(), rng.integers(3, 48, 6).tolist()
  cands = np.array([response[4]] + [t for t in (17, 22, 31, 40) if t != response[4]][:4], np.int64)
  ref = lookahead.NodeRef(question_id="q", question_index=0, rollout_id=0, position=4, m=0, positions=(4,),
                          correct=False, prompt=prompt, response=response, candidates=cands,
                          p=np.full(5, 0.2), p_succ=np.array([0.25, 1.0, 0.0, 0.5, 0.75]), rewards=[],
                          degenerate=False)
  q = (ref.p_succ + 0.05) / np.sum(ref.p_succ + 0.05)         # a teacher that favours success: a large first-order term
  kw = dict(graphdef=student.graphdef, lora_scale=2.0, policy=sampling.SamplingParams(),
            vocab_size=student.config.real_vocab_size, normalize=True)
  return student, base, adapters, ref, q, kw


def _logits(student, params, tokens):
  """Full-vocabulary logits of the last token: one causal forward of the unpadded sequence (`models.logits`, not
  the lookahead's left-padded batch)."""
  z = models.logits(dataclasses.replace(student, params=params), np.array([tokens]))
  return np.asarray(z[0, -1], np.float64)


def _value(z, ref):
  logp = z - z.max() - np.log(np.sum(np.exp(z - z.max())))
  p = np.exp(logp[ref.candidates])
  return np.sum(p / p.sum() * ref.p_succ)


def test_predicted_change_is_the_first_order_term_of_the_local_change(setup):
  student, base, adapters, ref, q, kw = setup
  conf = contexts.parse("c", "self:solution:reverse_kl")
  rel = []
  for eta in (1e-1, 3e-2, 1e-2):                     # below ~3e-3 fp32 round-off (~1e-4 relative) takes over
    out, _ = lookahead.node_step(student, adapters, base, ref, 5, q, 0.0, conf, eta, **kw)
    assert out["loss_new"] < out["loss"]                    # a descent step on the node's loss
    rel.append(abs(out["local"] - out["predicted"]) / abs(out["predicted"]))
  assert rel[1] < 0.3 * rel[0] and rel[2] < 0.3 * rel[1] and rel[2] < 1e-3, rel      # (i) - predicted = O(eta^2)


def test_local_change_matches_numpy_from_the_new_logits(setup):
  student, base, adapters, ref, q, kw = setup
  conf = contexts.parse("c", "self:solution:reverse_kl")        # the first test's compile (same shapes)
  for eta in (3e-2, 1e-3):
    out, new = lookahead.node_step(student, adapters, base, ref, 5, q, 0.0, conf, eta, **kw)
    tokens = ref.prompt + ref.response[:ref.position]
    v0 = _value(_logits(student, base, tokens), ref)                         # B = 0: the base model
    v1 = _value(_logits(student, lora.merge(base, new, scale=2.0), tokens), ref)
    np.testing.assert_allclose(out["value"], v0, rtol=1e-5)
    np.testing.assert_allclose(out["local"], v1 - v0, rtol=1e-3, atol=1e-7)
    assert abs(out["local"]) > 1e-4 and np.all(np.asarray(new[next(iter(new))]["b"]) != 0)


def test_rerun_interval_is_the_paired_t_interval():
  rng = np.random.default_rng(0)
  p, p_new = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
  old, new = rng.integers(0, 2, (4, 16)), rng.integers(0, 2, (4, 16))
  got = lookahead_summary.rerun_interval(p, p_new, old.tolist(), new.tolist())
  want = stats.ttest_rel(p_new @ new, p @ old).confidence_interval(0.95)     # replicate r paired across k
  np.testing.assert_allclose([got["rerun_lo"], got["rerun_hi"]], [want.low, want.high], rtol=1e-10)
  np.testing.assert_allclose(got["rerun_mean"], p_new @ new.mean(1) - p @ old.mean(1), rtol=1e-12)
  assert got["rerun_R"] == 16
  assert np.isnan(lookahead_summary.rerun_interval(p, p_new, old[:, :1].tolist(), new[:, :1].tolist())["rerun_lo"])
  ragged = old.tolist()
  ragged[0] = ragged[0][:3]
  assert np.isnan(lookahead_summary.rerun_interval(p, p_new, ragged, new.tolist())["rerun_hi"])


def _frame(rng, n=30):
  """Synthetic lookahead rows: predicted and local agree (a passing gradient check); re-runs with changed rewards
  agree with predicted on 12 of 21, and only a few have intervals narrower than |predicted|."""
  pred = rng.choice([-1, 1], n) * rng.uniform(1e-4, 2e-4, n)
  rerun = np.where(np.arange(n) < 12, pred, -pred) * 3
  changed = (np.arange(n) < 21).astype(int)
  half = np.where(np.arange(n) % 5 == 0, 1e-5, 1e-2)        # rows 0, 5, ..., 25 resolve
  return pd.DataFrame(dict(config_id="c", divergence="reverse_kl", degenerate=False, grad_norm=1.0,
                           predicted=pred, local=pred * 1.001, alignment=pred, rerun=rerun, rewards_changed=changed,
                           rerun_halfwidth=half, rerun_lo=rerun - half, rerun_hi=rerun + half, seconds=0.1,
                           rerun_seconds=0.2))


def test_summary_reports_a_gradient_check_and_agreement_against_chance():
  frame = _frame(np.random.default_rng(1))
  summary = lookahead_summary.summarise(frame)
  row = summary.iloc[0]
  assert not any("pred_vs_local" in c for c in summary.columns)
  assert row["gradient_check_agree"] == 1.0 and row["gradient_check_n"] == 30 and row["chance"] == 0.5
  assert row["changed_local_vs_rerun_n"] == 21 and row["changed_local_vs_rerun_agree"] == 12 / 21
  lo, hi = success.wilson_interval(12, 21)
  assert (row["changed_local_vs_rerun_lo"], row["changed_local_vs_rerun_hi"]) == (lo, hi) and lo < 0.5 < hi
  np.testing.assert_allclose(row["changed_local_vs_rerun_p_chance"], stats.binomtest(12, 21, 0.5).pvalue)
  # resolved: rows 0, 5, 10, 15, 20, 25; with changed rewards: 0, 5, 10, 15, 20; agreeing: 0, 5, 10.
  assert (row["reruns_resolved"], row["reruns_resolved_changed"], row["pred_vs_rerun_resolved_n"]) == (6, 5, 5)
  assert row["pred_vs_rerun_resolved_agree"] == 3 / 5
  config = cfg_lookahead.get_config()
  config.lookahead.study_workdir = "/study"
  text = lookahead_summary.summary_text(config, summary, frame)
  assert "gradient check" in text and "does not test whether the step raises" in text
  assert "chance (0.5)" in text and "p=" in text
  assert "5 of 30 re-runs test the predicted change" in text


def test_a_second_lookahead_on_a_workdir_in_use_is_refused_before_the_study_is_read(tmp_path, monkeypatch):
  """The lookahead holds its workdir's lock (claim.workdir_lock), as a study and the trainer do: two lookaheads on
  one workdir would each overwrite the other's tables."""
  config = cfg_lookahead.get_config()
  config.lookahead.study_workdir = str(tmp_path / "study")
  lock = claim.lock_path(tmp_path, 0)
  lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))    # a live run holds it
  monkeypatch.setattr(lookahead, "study_config", lambda *a, **k: pytest.fail("the study was read"))
  with pytest.raises(claim.WorkdirInUse, match=rf"^--workdir={tmp_path} is in use by another run"):
    lookahead.run(config, str(tmp_path))
  assert lock.exists() and not (tmp_path / "lookahead").exists()
  lock.unlink()                                                        # free: the run goes on to read the study
  with pytest.raises(pytest.fail.Exception, match="the study was read"):
    lookahead.run(config, str(tmp_path))
  assert not lock.exists()                                             # released on the way out
