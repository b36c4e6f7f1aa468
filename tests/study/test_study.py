"""The smoke study end to end: records recomputed with numpy, resume after SIGKILL, bad inputs."""
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from opd_jax import records

REPO = pathlib.Path(__file__).resolve().parents[2]
KEYS = {"rollouts": ["question_id", "rollout_id"], "tokens": ["question_id", "rollout_id", "teacher", "context",
                                                              "position"],
        "nodes": ["question_id", "rollout_id", "config_id", "position"]}


def _env(cache_dir):
  env = dict(os.environ, PYTHONPATH=str(REPO), JAX_COMPILATION_CACHE_DIR=str(cache_dir),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PLATFORMS="cpu")
  return env


def _main(workdir, cache_dir, *overrides, config="configs/smoke.py"):
  return [sys.executable, "-m", "opd_jax.main", f"--config={REPO / config}", f"--workdir={workdir}",
          "--config.logging.progress=False", *overrides]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  """An uninterrupted smoke run (subprocess) -> its workdir."""
  base = tmp_path_factory.mktemp("smoke")
  workdir = base / "full"
  proc = subprocess.run(_main(workdir, base / "jax_cache"), env=_env(base / "jax_cache"), capture_output=True,
                        text=True, timeout=900, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "Mean alignment" in proc.stdout or "alignment" in proc.stdout
  return workdir, base / "jax_cache"


def _tables(workdir):
  out = {}
  for name in records.TABLES:
    frame = records.read_table(workdir, name)
    out[name] = frame.sort_values(KEYS[name]).reset_index(drop=True)
  return out


def _softmax_free(p, q, div, beta, clip, adv):
  """Independent numpy transcription of paper.md's descent directions (0 log 0 = 0)."""
  with np.errstate(divide="ignore", invalid="ignore"):
    lp, lq = np.where(p > 0, np.log(p), 0.0), np.where(q > 0, np.log(q), 0.0)
    kl = np.sum(np.where(p > 0, p * (lp - lq), 0.0))
    if div == "reverse_kl":
      return p * (lq - lp + kl)
    if div == "clipped_reverse_kl":
      return np.zeros_like(p) if kl >= clip else p * (lq - lp + kl)
    if div == "forward_kl":
      return q - p
    if div == "jsd":
      m = beta * q + (1 - beta) * p
      lm = np.where(m > 0, np.log(m), 0.0)
      klm = np.sum(np.where(p > 0, p * (lp - lm), 0.0))
      return (1 - beta) * p * (lm - lp + klm)
    if div == "sampled_token":
      e = np.zeros_like(p)
      e[0] = 1.0
      return adv * (e - p)
  raise AssertionError(div)


def test_nodes_recomputed_with_numpy_and_tables_agree(smoke):
  workdir, _ = smoke
  t = _tables(workdir)
  nodes, tokens = t["nodes"], t["tokens"]
  assert len(nodes) > 0 and len(tokens) > 0
  defined = nodes[nodes.alignment_nan_reason != "context_unavailable"]
  assert (defined.correct).any() and (~defined.correct).any()
  assert (defined.alignment.notna() & defined.correct).any() and (defined.alignment.notna() & ~defined.correct).any()
  student = tokens[(tokens.teacher == "self")].drop_duplicates(["question_id", "rollout_id", "position"])
  logp = student.set_index(["question_id", "rollout_id", "position"]).logp
  checked = 0
  for row in defined.itertuples():
    p, q = np.asarray(row.p), np.asarray(row.q)
    succ, n = np.asarray(row.successes), np.asarray(row.n)
    assert np.issubdtype(succ.dtype, np.integer) and np.all((0 <= succ) & (succ <= n))
    assert row.candidates[0] == row.sampled_token and row.sampled_token in row.candidates
    np.testing.assert_allclose(row.p_succ, succ / n, atol=1e-12)
    # Per-replicate rewards give the counts; Wilson bounds from scipy's binomtest (method "wilson").
    assert [len(r) for r in row.rewards] == list(n) and [int(np.sum(r)) for r in row.rewards] == list(succ)
    cis = [stats.binomtest(int(k), int(m)).proportion_ci(method="wilson") for k, m in zip(succ, n)]
    np.testing.assert_allclose(row.p_succ_lo, [c.low for c in cis], atol=1e-9)
    np.testing.assert_allclose(row.p_succ_hi, [c.high for c in cis], atol=1e-9)
    # Split-half noise ceiling from the rewards: each candidate's first and next floor(n_k / 2) replicates.
    halves = [np.array([np.mean(np.asarray(r)[i * (len(r) // 2):(i + 1) * (len(r) // 2)]) for r in row.rewards])
              for i in (0, 1)]
    gh = [p * (h - p @ h) for h in halves]
    if any(np.all(h == h[0]) for h in halves):
      assert np.isnan(row.noise_ceiling)
    else:
      assert abs(row.noise_ceiling - gh[0] @ gh[1] / (np.linalg.norm(gh[0]) * np.linalg.norm(gh[1]))) < 1e-6
    ps = succ / n
    value = p @ ps
    assert abs(row.value - value) < 1e-5
    assert abs(row.teacher_advantage - (q @ ps - value)) < 1e-5
    np.testing.assert_allclose(p[0] * row.p_mass, np.exp(logp[(row.question_id, row.rollout_id, row.position)]),
                               rtol=1e-5, atol=1e-7)
    g_star = p * (ps - value)
    degenerate = all(succ[i] * n[j] == succ[j] * n[i] for i in range(len(n)) for j in range(len(n)))
    assert row.degenerate == degenerate
    g = _softmax_free(p, q, row.divergence, row.beta, row.clip, row.sampled_advantage)
    if degenerate:
      assert np.isnan(row.alignment) and row.alignment_nan_reason == "degenerate"
    elif np.linalg.norm(g) < max(1e-12, 1e-5 * np.linalg.norm(p)):      # fp32 round-off level: no cosine
      assert np.isnan(row.alignment) and row.alignment_nan_reason == "zero_distillation_gradient"
    else:
      cos = g_star @ g / (np.linalg.norm(g_star) * np.linalg.norm(g))
      assert abs(row.alignment - cos) < 1e-4, (row.config_id, row.alignment, cos)
      checked += 1
  assert checked >= 10


def test_alignment_ratio_recomputed_with_numpy(smoke):
  """report.common.with_estimand("alignment_ratio") (issue 48): per node <g*, g_D> / |g_D| over one scale per
  node group, sqrt of the mean over the group's distinct nodes of <g*_a, g*_b> (halves: the rewards at even and
  odd places), recomputed from the rows with numpy; the group's mean is in [-1, 1]."""
  from opd_jax.report import common  # pylint: disable=g-import-not-at-top
  nodes = _tables(smoke[0])["nodes"]
  for target, mask in (("all", np.ones(len(nodes), bool)), ("incorrect", ~nodes.correct.to_numpy(bool))):
    got = common.with_estimand(nodes, "alignment_ratio", target)
    s, proj = {}, np.full(len(nodes), np.nan)
    for i, row in enumerate(nodes.itertuples()):
      p = np.asarray(row.p)
      gh = [p * (h - p @ h) for h in ([np.mean(np.asarray(r)[j::2]) for r in row.rewards] for j in (0, 1))]
      if mask[i]:
        s[(row.question_id, row.rollout_id, row.position)] = gh[0] @ gh[1]
      if len(row.q):
        g = _softmax_free(p, np.asarray(row.q), row.divergence, row.beta, row.clip, row.sampled_advantage)
        ps = np.asarray(row.successes) / np.asarray(row.n)
        if np.linalg.norm(g) >= max(1e-12, 1e-5 * np.linalg.norm(p)):
          proj[i] = p * (ps - p @ ps) @ g / np.linalg.norm(g)
    want = proj / np.sqrt(np.mean(list(s.values())))
    np.testing.assert_allclose(got.alignment.to_numpy(float), want, rtol=1e-4, atol=1e-6)
    means = got[mask].groupby("config_id").alignment.mean().dropna()      # self_plain: q = p, no direction
    assert len(means) >= 4 and (means.abs() <= 1).all()


def test_manifest_records_the_candidate_set_rule_of_the_views_scored(smoke):
  """manifest.json "candidate_set" (issue 34, item 7) against the records: the views are the tokens table's
  (teacher, context) pairs, and no node has more candidates than the rule allows (1 + k_s + k_t x views)."""
  workdir, _ = smoke
  rule = json.loads((workdir / "manifest.json").read_text())["candidate_set"]
  budget = json.loads((workdir / "config.json").read_text())["budget"]
  tokens, nodes = records.read_table(workdir, "tokens"), records.read_table(workdir, "nodes")
  views = sorted({f"{t}:{c}" for t, c in zip(tokens.teacher, tokens.context)})
  assert rule == {"student_top_k": budget["student_top_k"], "teacher_top_k": budget["teacher_top_k"], "views": views}
  widest = max(len(c) for c in nodes.candidates)
  assert len(views) == 5 and 1 + rule["student_top_k"] < widest <= 1 + rule["student_top_k"] + len(views)
  # What a new study on unseen questions excludes (config.task.exclude; issue 49, item 4): every processed question.
  from configs import smoke as smoke_config  # pylint: disable=g-import-not-at-top
  from opd_jax.study import question_pool  # pylint: disable=g-import-not-at-top
  seen = json.loads((workdir / "questions_seen.json").read_text())
  processed = json.loads((workdir / "progress.json").read_text())["processed"]
  texts = {str(p.id): p.question for p in question_pool.load_task(smoke_config.get_config()).problems}
  assert sorted(seen) == sorted(texts[str(q)] for q in processed) and seen


def test_self_plain_context_gives_exact_zero_predictors(smoke):
  tokens = _tables(smoke[0])["tokens"]
  plain = tokens[(tokens.teacher == "self") & (tokens.context == "plain")]
  assert len(plain) > 0
  for k in ("kl_pq", "kl_qp", "js", "jsd_beta", "tv", "logq_minus_logp"):
    assert (plain[k] == 0.0).all(), k
  assert (plain.logp == plain.logq).all()
  assert (plain.cosine == 1.0).all() and (plain.topk_overlap == 1.0).all()
  assert (plain.entropy_p == plain.entropy_q).all()


def test_cost_models_prompt_lengths_are_the_studys(smoke):
  """The dry run's measured prompt lengths (`estimate.planned_work`) render the questions as the study did."""
  from configs import smoke as smoke_config  # pylint: disable=g-import-not-at-top
  from opd_jax.cost import estimate  # pylint: disable=g-import-not-at-top
  from opd_jax import models
  from opd_jax.study import question_pool
  config = smoke_config.get_config()
  rollouts = _tables(smoke[0])["rollouts"]
  task = question_pool.load_task(config)
  chosen = [p for p in task.problems if p.id in set(rollouts.question_id)]
  prompt, extra = estimate.context_lengths(config, task, chosen, models.byte_tokenizer(), estimate.context_names(config))
  assert prompt == pytest.approx(rollouts.drop_duplicates("question_id").prompt_ids.map(len).mean())
  assert set(extra) == estimate.context_names(config) - {"plain"} and min(extra.values()) > 0
  work = estimate.planned_work(config)
  assert work.prompt_tokens == pytest.approx(estimate.context_lengths(config, task, task.problems[:64],
                                                                   models.byte_tokenizer(), {"plain"})[0])


def test_sigkill_then_resume_with_repair_equals_uninterrupted(smoke, tmp_path):
  full, cache = smoke
  workdir = tmp_path / "killed"
  proc = subprocess.Popen(_main(workdir, cache), env=_env(cache), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, cwd=REPO)
  prog = workdir / "progress.json"
  deadline = time.time() + 600
  killed = False
  while time.time() < deadline and proc.poll() is None:
    if prog.exists():
      try:
        n = len(json.loads(prog.read_text())["selected"])
      except (json.JSONDecodeError, KeyError):
        n = 0
      if 1 <= n < 3:
        proc.send_signal(signal.SIGKILL)
        killed = True
        break
    time.sleep(0.02)
  proc.wait()
  assert killed, "the smoke run ended before it could be killed mid-way"
  assert len(json.loads(prog.read_text())["selected"]) < 3
  part = records.part_files(workdir, "tokens")[0]           # and one of its parts damaged (issue 35, item 3)
  part.write_bytes(part.read_bytes()[:-100])
  rerun = subprocess.run(_main(workdir, cache, "--repair"), env=_env(cache), capture_output=True, text=True,
                         timeout=900, cwd=REPO)
  assert rerun.returncode == 0 and "repair: 1 question(s) with damaged records" in rerun.stderr, rerun.stderr[-3000:]
  a, b = _tables(full), _tables(workdir)
  for name in records.TABLES:
    assert list(a[name].columns) == list(b[name].columns)
    pd.testing.assert_frame_equal(a[name], b[name], check_exact=True)
  assert (full / "summary.csv").read_text() == (workdir / "summary.csv").read_text()
  # Wall times differ, and so does the work spent (a killed run's block is sampled again): nothing else.
  strip = lambda text: [l for l in text.splitlines() if "timings_s" not in l and "`work." not in l]
  assert strip((full / "summary.md").read_text()) == strip((workdir / "summary.md").read_text())


def _snapshot(workdir):
  return {p: p.read_bytes() for p in sorted(pathlib.Path(workdir).rglob("*")) if p.is_file()}


def _bad_inputs(tmp_path, smoke_workdir):
  """(name, argv, workdir, expected fragment of the one line, exit code) for the table of bad inputs; also builds
  the files they need under tmp_path."""
  from tests.models.test_parity import make_hf_folder  # pylint: disable=g-import-not-at-top
  smoke = ["--config.logging.progress=False"]
  cfg = f"--config={REPO / 'configs/smoke.py'}"
  gsm = tmp_path / "gsm8k_test.jsonl"
  gsm.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": f"{i} apples\n#### {a}"})
                           for i, a in enumerate(["4", "two", "1/2", ""])) + "\n")
  rows = tmp_path / "rows.jsonl"
  rows.write_text('{"question": "q", "answer": "#### 1"}\n"just a string"\n')
  garbage, bad_json = tmp_path / "garbage", tmp_path / "badjson"
  for folder in (garbage, bad_json):
    folder.mkdir()
    make_hf_folder(folder, "qwen2", tie=True, max_position_embeddings=4096)
  (garbage / "model.safetensors").write_bytes(np.random.default_rng(0).bytes(4096))
  (bad_json / "config.json").write_text('{\n  "architectures": ["Qwen2ForCausalLM"],\n  "x": 1,,\n}')
  a_file = tmp_path / "a_file"
  a_file.write_text("not a directory")
  locked = tmp_path / "locked"
  locked.mkdir()
  (locked / "lock.0.json").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
  copies = {}
  for name in ("foreign", "truncated", "rerun", "other_config"):
    copies[name] = tmp_path / name
    shutil.copytree(smoke_workdir, copies[name])
  part = sorted((copies["foreign"] / "records" / "nodes").glob("part-*.parquet"))[0]
  records.write_part(copies["foreign"], "nodes", "zz-foreign", pd.read_parquet(part), config_hash="0" * 64)
  part = sorted((copies["truncated"] / "records" / "tokens").glob("part-*.parquet"))[0]
  part.write_bytes(part.read_bytes()[:-100])
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()
  (copies["rerun"] / "lock.0.json").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
  fresh = lambda name: tmp_path / f"w-{name}"
  table = [
      ("unknown field", [cfg, "--config.foo=1"], fresh("a"), "unknown config field 'config.foo'", 2),
      ("missing config file", [f"--config={tmp_path / 'nope.py'}"], fresh("b"), "no file '", 2),
      ("unknown variant", [cfg + ":foo"], fresh("c"), "unknown variant 'foo' of smoke", 2),
      ("bad --configuration", [cfg, "--configuration=mine"], fresh("d"), "expected name=teacher:context", 2),
      ("negative seed", [cfg, "--config.seed=-3"], fresh("e"), "config.seed must be an integer >= 0", 2),
      ("negative model seed", [cfg, "--config.configurations.external=random:-1:plain:reverse_kl"], fresh("f"),
       "config.configurations['external']: a random model spec", 2),
      ("nan clip", [cfg, "--config.configurations.clipped=self:summary:clipped_reverse_kl@nan"], fresh("g"),
       "must be a finite number, got 'nan'", 2),
      ("nan float field", [cfg, "--config.scoring.beta=nan"], fresh("h"), "config.scoring.beta must be a finite", 2),
      ("report predictor", [cfg, "--config.report.colour_by=nope"], fresh("h2"), "config.report.colour_by must", 2),
      ("teacher temperature", [cfg, "--config.scoring.teacher_temperature=-1.0"], fresh("h3"),
       "config.scoring.teacher_temperature must be a finite number >= 0", 2),
      ("unknown preset", [cfg, "--config.student.name=no-such-preset"], fresh("i"), "no-such-preset", 2),
      ("missing folder", [cfg, "--config.student.name=/nonexistent/model/folder"], fresh("j"),
       "/nonexistent/model/folder", 2),
      ("unknown task", [cfg, "--config.task.name=no_such_task"], fresh("k"), "no_such_task", 2),
      ("unknown context", [cfg, "--config.configurations.external=random:1:no_context:reverse_kl"], fresh("l"),
       "no_context", 2),
      ("unknown divergence", [cfg, "--config.configurations.external=random:1:plain:no_divergence"], fresh("m"),
       "no_divergence", 2),
      ("jsd beta 1", [cfg, "--config.configurations.solution_jsd=self:solution:jsd@1.0"], fresh("n"), "beta", 2),
      ("R = 0", [cfg, "--config.budget.continuations_per_candidate=0"], fresh("o"), "continuations_per_candidate", 2),
      ("negative nodes", [cfg, "--config.budget.nodes_per_rollout=-2"], fresh("p"), "nodes_per_rollout", 2),
      ("task without solutions", [cfg, "--config.task.name=reasoning_gym:products"], fresh("q"), "solution", 2),
      ("student context", [cfg, "--config.random_model.max_seq_len=16"], fresh("r"), "max_new_tokens", 2),
      ("teacher context", [cfg, "--config.random_model.max_seq_len=120"], fresh("s"),
       "context of teacher 'self' needs up to", 2),
      ("gold answers", [cfg, "--config.task.name=gsm8k", f"--config.task.path={gsm}", "--config.task.num_problems=0"],
       fresh("t"),
       "3 of 4 gold answers do not grade", 2),
      ("jsonl row", [cfg, "--config.task.name=gsm8k", f"--config.task.path={rows}"], fresh("u"),
       "line 2 is a JSON str, not an object", 2),
      ("garbage safetensors", [cfg, f"--config.student.name={garbage}"], fresh("v"),
       "model.safetensors: not a valid safetensors file", 2),
      ("invalid config.json", [cfg, f"--config.student.name={bad_json}"], fresh("w"),
       "config.json: invalid JSON at line 3", 2),
      ("workdir is a file", [cfg], a_file, "is a file, not a directory", 2),
      ("workdir locked", [cfg], locked, f"in use by another run with process index 0 (pid {os.getpid()}", 2),
      ("foreign part", [cfg], copies["foreign"], "belongs to another study", 2),
      ("truncated part", [cfg], copies["truncated"], "is not readable parquet; it is truncated or damaged: rerun the "
       "study's command with --repair added", 2),
      ("another config's workdir", [cfg, "--config.seed=1"], copies["other_config"], "different config", 2),
      ("interrupted", [cfg], fresh("x"), "interrupted: nothing had finished, so the workdir was removed", 130),
  ]
  if os.geteuid() != 0:                                     # root writes anywhere
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    table.append(("read-only workdir", [cfg], read_only, "is not writable", 2))
  return [(n, [*a, f"--workdir={w}", *smoke], w, frag, code) for n, a, w, frag, code in table], copies


def test_bad_inputs_fail_in_one_clear_line_and_reruns_report_without_work(smoke, tmp_path):
  """Every bad input of the table fails with exactly one `error:` line holding the fragment, no traceback,
  the exit code, and its workdir unchanged; all cases run in one interpreter (tests/cli_batch.py). Then: a
  finished run reruns without work, an added --configuration is planned, a study that measured nothing warns."""
  cases, copies = _bad_inputs(tmp_path, smoke[0])
  cfg = f"--config={REPO / 'configs/smoke.py'}"
  unsolvable = tmp_path / "unsolvable.jsonl"                # random models never answer 987654321: all degenerate
  unsolvable.write_text("\n".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n"
                                                                                         "#### 987654321"})
                                  for i in range(2)) + "\n")
  extra = [
      {"argv": [cfg, f"--workdir={copies['rerun']}", "--config.logging.progress=False"]},
      {"argv": [cfg, "--configuration=mine=self:answer:reverse_kl", "--dry_run"]},
      {"argv": [cfg, f"--workdir={tmp_path / 'nothing'}", "--config.logging.progress=False",
                "--config.task.name=gsm8k", f"--config.task.path={unsolvable}", "--config.task.num_problems=0",
                "--config.selection=all", "--config.budget.questions=1",      # one node of one view is enough to
                "--config.configurations={'solution': 'self:solution:reverse_kl'}",   # measure nothing: half the
                "--config.budget.node_rollouts_per_question=1", "--config.budget.nodes_per_rollout=1"]},   # compiles
  ]
  before = {name: _snapshot(w) if w.is_dir() else None for name, _, w, _, _ in cases}
  manifest = (copies["rerun"] / "manifest.json").read_bytes()
  spec = tmp_path / "cases.json"
  spec.write_text(json.dumps([{"argv": a, "interrupt": n == "interrupted"} for n, a, *_ in cases] + extra))
  proc = subprocess.run([sys.executable, str(REPO / "tests" / "cli_batch.py"), str(spec), str(tmp_path / "out.json")],
                        env=_env(smoke[1]), capture_output=True, text=True, timeout=600, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((tmp_path / "out.json").read_text())
  for (name, _, workdir, fragment, code), got in zip(cases, results):
    lines = [l for l in got["stderr"].splitlines() if l.startswith("error:") or l.startswith("interrupted")]
    assert got["code"] == code and len(lines) == 1 and fragment in lines[0], (name, got)
    assert "Traceback" not in got["stderr"] and "complete:" not in got["stderr"], (name, got["stderr"][-2000:])
    if before[name] is not None:
      assert _snapshot(workdir) == before[name], name
    else:
      assert not (workdir / "records").exists() and not (workdir / "config.json").exists(), name
  rerun, added, nothing = results[len(cases):]
  assert rerun["code"] == 0 and "complete" in rerun["stderr"], rerun
  assert (copies["rerun"] / "manifest.json").read_bytes() == manifest            # stage timings kept
  # A dead run's lock (killed during its report) is taken over with the warning, and released (issue 35, item 3).
  assert rerun["stderr"].startswith("warning: taking over the stale lock")
  assert not (copies["rerun"] / "lock.0.json").exists()
  out = rerun["stdout"].splitlines()
  verdict = json.loads((copies["rerun"] / "verdict.json").read_text())["line"]
  head = [i for i, l in enumerate(out) if l.split()[:2] == ["config_id", "group"]]   # the table's header
  assert out[0] == verdict and len(head) == 1 and out[-1].startswith("records: ")
  # verdict (and what would decide it), table, one line
  assert len(out) == head[0] + 2 + len(pd.read_csv(copies["rerun"] / "summary.csv"))
  assert added["code"] == 0 and "x 6 (teacher, context) scorings" in added["stdout"], added
  assert nothing["code"] == 0 and "WARNING: all" in nothing["stderr"] and "degenerate" in nothing["stderr"], nothing
  assert "WARNING: all" in (tmp_path / "nothing" / "summary.md").read_text()


def test_another_tokenizer_reads_text_and_the_trainer_refuses_it(monkeypatch, tmp_path):
  """A teacher whose tokenizer differs (one added special token) is a cross-tokenizer teacher of the study
  (`cross_view.cross_teacher`); the trainer, whose loss sums over one vocabulary, refuses it before training."""
  from configs import smoke as smoke_config
  from opd_jax.study import environment
  from opd_jax.models import tokenizer as tok_lib
  original = environment.load_model

  def load(spec, config):
    model = original(spec, config)
    if spec == "random:1":
      other = tok_lib.byte_tokenizer()
      other.add_special_tokens({"additional_special_tokens": ["<|tool|>"]})
      model = type(model)(**{**model.__dict__, "tokenizer": other})
    return model

  monkeypatch.setattr(environment, "load_model", load)
  env = environment.setup(smoke_config.get_config())
  assert env.cross == {"random:1"} and env.is_cross(("random:1", "plain")) and not env.is_cross(("self", "plain"))
  # Its view reads q on C(u) and adds no top-k: the study's candidate-set rule leaves it out (manifest.json).
  assert environment.candidate_rule(env) == {"student_top_k": 2, "teacher_top_k": 1, "views": [
      "self:contrastive", "self:plain", "self:solution", "self:summary"]}
  from opd_jax.teachers import cross_view  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="must share the tokenizer for the trainer"):
    cross_view.cross_teacher(smoke_config.get_config(), "random:1", env.student.tokenizer,
                             env.teachers["random:1"].tokenizer, where="config.train.configuration", cross_ok=False)


def test_node_rollouts_balanced_and_prefer_finished_order():
  from opd_jax.study import questions  # pylint: disable=g-import-not-at-top
  correct = [False, True, False, False, True]
  assert questions._balanced(correct, 2) == [0, 1]                       # lowest ids of each group
  assert questions._balanced(correct, 3) == [0, 1, 4]                    # alternating: correct 1, wrong 0, correct 4
  assert questions._balanced(correct, 9) == [0, 1, 2, 3, 4]
  finished = [False, True, False, True, True]                         # rollouts 0 and 2 hit the cap
  order = sorted(range(5), key=lambda r: (not finished[r], r))        # what budget.prefer_finished does
  assert questions._balanced(correct, 2, order) == [1, 3]                 # answered-wrong 3 before truncated 0
  assert questions._balanced([False, False], 2, [1, 0]) == [0, 1]
  # budget.node_group="target": the verdict's group only, in `order`, fewer where fewer are
  assert questions.node_rollouts(correct, 2, list(range(5)), "incorrect") == [0, 2]
  assert questions.node_rollouts(correct, 2, order, "incorrect") == [0, 3]    # answered-wrong 3, then truncated 0
  assert questions.node_rollouts(correct, 9, list(range(5)), "correct") == [1, 4]
  assert questions.node_rollouts(correct, 3, list(range(5)), "all") == questions._balanced(correct, 3)


def _nucleus(z, temperature, top_p):
  """numpy sampled policy: softmax(z / T), then the most likely tokens up to the one crossing top_p."""
  z = np.asarray(z, np.float64) / temperature
  p = np.exp(z - z.max())
  p /= p.sum()
  order = np.argsort(-p, kind="stable")
  keep = np.zeros_like(p, bool)
  keep[order[:np.searchsorted(np.cumsum(p[order]), top_p) + 1]] = True
  p = np.where(keep, p, 0.0)
  return p / p.sum()


def test_tempered_nucleus_policy_p_and_scaled_q_match_an_independent_forward(tmp_path):
  """At T = 0.8, top-p 0.9 the node rows' p is the sampled policy, q the T-scaled teacher (GKD/TRL), and V,
  teacher advantage, sampled-token advantage and alignment follow from them: recomputed from a plain full
  forward of each model (no cache, no chunks) and numpy."""
  from opd_jax.study import environment  # pylint: disable=g-import-not-at-top
  from configs import smoke as smoke_config  # pylint: disable=g-import-not-at-top
  from opd_jax import models  # pylint: disable=g-import-not-at-top
  from opd_jax.study import pipeline
  config = smoke_config.get_config()
  config.logging.progress = False
  config.sampling.temperature, config.sampling.top_p = 0.8, 0.9
  config.budget.questions, config.selection = 1, "all"
  config.configurations = {"rkl": "random:1:plain:reverse_kl", "tok": "random:1:plain:sampled_token"}
  pipeline.run(config, str(tmp_path))
  manifest = json.loads((tmp_path / "manifest.json").read_text())
  assert manifest["policy"]["student"] == {"temperature": 0.8, "top_p": 0.9, "top_k": 0}
  assert manifest["policy"]["teacher"]["temperature"] == 0.8 and "conventions" in manifest["schema"]
  nodes, rollouts = records.read_table(tmp_path, "nodes"), records.read_table(tmp_path, "rollouts")
  student, teacher = environment.load_model("random:0", config), environment.load_model("random:1", config)
  by_id = rollouts.set_index(["question_id", "rollout_id"])
  for ro in rollouts.itertuples():                                    # the sampler's log-probs: sampled policy
    seq = list(ro.prompt_ids) + list(ro.response_ids)
    z = np.asarray(models.logits(student, np.asarray([seq]))[0])
    P = len(ro.prompt_ids)
    lp = [np.log(_nucleus(z[P - 1 + t], 0.8, 0.9)[tok]) for t, tok in enumerate(ro.response_ids)]
    assert abs(ro.logprob_sum - sum(lp)) < 1e-3 * max(1, len(lp))
  checked = 0
  for row in nodes.itertuples():
    ro = by_id.loc[(row.question_id, row.rollout_id)]
    seq = np.asarray([list(ro.prompt_ids) + list(ro.response_ids)[:row.position]])
    pi = _nucleus(np.asarray(models.logits(student, seq)[0, -1]), 0.8, 0.9)
    zq = np.asarray(models.logits(teacher, seq)[0, -1], np.float64) / 0.8
    qq = np.exp(zq - zq.max())
    qq /= qq.sum()
    c = np.asarray(row.candidates)
    p, q = pi[c] / pi[c].sum(), qq[c] / qq[c].sum()
    np.testing.assert_allclose(row.p, p, atol=2e-5)
    np.testing.assert_allclose(row.q, q, atol=2e-5)
    assert abs(row.p_mass - pi[c].sum()) < 2e-5 and abs(row.q_mass - qq[c].sum()) < 2e-5
    adv = np.log(qq[c[0]]) - np.log(pi[c[0]])
    assert abs(row.sampled_advantage - adv) < 1e-3
    ps = np.asarray(row.p_succ)
    ran = ~np.isnan(ps)                   # candidates outside the nucleus (p = 0) get no continuations
    assert np.all(ran | (p == 0)) and np.all(ran == (np.asarray(row.n) > 0))
    value = p[ran] @ ps[ran]
    q_ran = q[ran] / q[ran].sum() if not ran.all() else q      # teacher advantage on the candidates that ran
    assert abs(row.value - value) < 2e-5 and abs(row.teacher_advantage - (q_ran @ ps[ran] - value)) < 2e-5
    ps = np.where(ran, ps, 0.0)
    g_star, g = p * (ps - value), _softmax_free(p, q, row.divergence, row.beta, row.clip, adv)
    if not np.isnan(row.alignment):
      cos = g_star @ g / (np.linalg.norm(g_star) * np.linalg.norm(g))
      assert abs(row.alignment - cos) < 1e-3, (row.config_id, row.alignment, cos)
      checked += 1
  assert checked >= 4
  assert any(np.any(np.asarray(r) == 0.0) for r in nodes.p)          # some candidate lies outside the nucleus


def test_every_part_has_the_one_schema_even_empty_or_all_null(tmp_path):
  """Parts written from an all-null row and from an empty frame read back as one table with the schema's
  columns and types (pandas.read_parquet of the directory, as the README says)."""
  names = records.SCHEMAS["nodes"].names
  lists = {n for n, f in zip(names, records.SCHEMAS["nodes"]) if str(f.type).startswith("list")}
  row = {n: ([] if n in lists else None) for n in names}
  row.update(question_id="q0", rollout_id=0, config_id="c", position=3, alignment=float("nan"),
             rewards=[[1, 0], [0]], n=[2, 1], successes=[1, 0])
  records.write_part(tmp_path, "nodes", "q0", pd.DataFrame([row]))
  records.write_part(tmp_path, "nodes", "q1", pd.DataFrame())
  back = pd.read_parquet(tmp_path / "records" / "nodes")
  assert list(back.columns) == names and len(back) == 1
  assert [list(r) for r in back.rewards[0]] == [[1, 0], [0]] and np.isnan(back.alignment[0])
  assert list(records.read_table(tmp_path, "nodes").columns) == names
  assert list(records.read_table(tmp_path, "tokens").columns) == records.SCHEMAS["tokens"].names
  with pytest.raises(ValueError, match="not in the schema.*extra"):
    records.write_part(tmp_path, "nodes", "q2", pd.DataFrame([{**row, "extra": 1}]))
  assert not (tmp_path / "records" / "nodes" / "part-q2.parquet").exists()


def test_ctrl_c_exits_even_when_a_library_swallows_it():
  # The child swallows every SIGINT (its own Python handler, as a library holding the main thread may): the press
  # only runs the child's handler, and the wakeup-fd thread exits with 130 and the one `interrupted:` line once
  # the main thread has not raised KeyboardInterrupt within main.GRACE_S. (A handler, not `except
  # KeyboardInterrupt` in a loop: a press between the loop's statements would escape it, a race.)
  code = ("import signal, time\nfrom opd_jax import main\nmain.exit_on_interrupt()\n"
          "signal.signal(signal.SIGINT, lambda *_: print('swallowed', flush=True))\nprint('ready', flush=True)\n"
          "while True:\n  time.sleep(60)\n")
  proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
  assert proc.stdout.readline().strip() == "ready"
  proc.send_signal(signal.SIGINT)
  assert proc.stdout.readline().strip() == "swallowed"         # the press only ran the child's handler
  out, err = proc.communicate(timeout=60)                      # a safety net: the exit comes after GRACE_S
  from opd_jax import main  # pylint: disable=g-import-not-at-top
  assert proc.returncode == 130 and err.strip().splitlines() == [main.NOTHING_STARTED]    # no job had begun


# The second block's base rollouts of the smoke study hold the main thread outside Python, as an XLA compile does
# (issue 35, item 2): SIGINT blocked in that thread (the press lands on another thread, as on XLA's), then a sleep
# that nothing interrupts.
_STUCK = """import signal, sys, time
from opd_jax import main
from opd_jax.study import questions
original, calls = questions.base_rollouts, []

def stuck(env, block):
  calls.append(block)
  if len(calls) == 2:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    print("stuck in base rollouts", file=sys.stderr, flush=True)
    time.sleep(600)
  return original(env, block)

questions.base_rollouts = stuck
sys.argv = ["opd_jax.main", *sys.argv[1:]]
main.run()
"""


def test_the_first_ctrl_c_exits_while_the_main_thread_is_held_outside_python(smoke, tmp_path):
  """One press exits with 130 and one `interrupted:` line although the main thread never runs Python again; the
  first block's records stay, equal to the uninterrupted run's, and the lock is released (the same command
  resumes: test_sigkill_then_resume_with_repair_equals_uninterrupted)."""
  full, cache = smoke
  workdir = tmp_path / "interrupted"
  proc = subprocess.Popen([sys.executable, "-c", _STUCK, *_main(workdir, cache)[3:]], env=_env(cache), text=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
  lines = []
  while (line := proc.stderr.readline()) and "stuck in base rollouts" not in line:
    lines.append(line)
  assert line, "".join(lines)[-3000:]
  proc.send_signal(signal.SIGINT)
  rest = proc.communicate(timeout=120)[1]                      # a safety net: the exit comes after GRACE_S
  from opd_jax import main  # pylint: disable=g-import-not-at-top
  assert proc.returncode == 130 and [l for l in rest.splitlines() if l.strip()] == [main.INTERRUPTED], rest
  assert not (workdir / "lock.0.json").exists()
  done = json.loads((workdir / "progress.json").read_text())["selected"]
  assert done and records.check_parts(workdir) == len(done) * len(records.TABLES)
  a, b = _tables(full), _tables(workdir)
  for name in records.TABLES:
    pd.testing.assert_frame_equal(a[name][a[name].question_id.isin(done)].reset_index(drop=True), b[name],
                                  check_exact=True)
