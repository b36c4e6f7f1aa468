"""The figures README.md, docs/results.md and configs/teacher_sweep.py quote from a run are those of the run's
committed result files (issue 50, item 3): each test reads the file under docs/data/ a figure came from, formats
the figure as the prose writes it and asserts the prose says exactly that, so a rerun that changes a number fails
here instead of leaving the prose wrong. Wall-time estimates are the dry run's (`study.planning.estimate_text`,
item 4); measured wall times come from a committed measurement that names its host and load. Files only: no model
runs, no timing."""
import json
import pathlib
import re

import pandas as pd
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA = REPO / "docs" / "data"


def _text(path: str) -> str:
  """The file's text with every run of whitespace (line wraps included) one space: prose wraps anywhere."""
  return re.sub(r"\s+", " ", (REPO / path).read_text())


def _lines(path: str) -> list[str]:
  return (REPO / path).read_text().splitlines()


def _says(path: str, *phrases: str, source: str = "its committed result file"):
  text = _text(path)
  for phrase in phrases:
    assert phrase in text, f"{path} should say {phrase!r} (from {source}); update the prose"


def _row(path: str, start: str, contains: str = "") -> str:
  """The one table row of `path` that starts with `start` (and holds `contains`)."""
  rows = [line for line in _lines(path) if line.startswith(start) and contains in line]
  assert len(rows) == 1, f"{path}: {len(rows)} table rows start with {start!r} and hold {contains!r}"
  return rows[0]


def _f(x: float, spec: str) -> str:
  return format(x + 0.0, spec)        # + 0.0: no "-0.000"


def _ci(v: float, lo: float, hi: float, spec: str = "+.3f") -> str:
  return f"{_f(v, spec)} [{_f(lo, spec)}, {_f(hi, spec)}]"


# ------------------------------------------------------------------------------------------------------------
# The default study (configs/teacher_sweep.py): docs/data/default_study/, one run of the current code.

DEFAULT = DATA / "default_study"


def _default():
  summary = pd.read_csv(DEFAULT / "summary.csv").set_index(["config_id", "group"])
  verdict = json.loads((DEFAULT / "verdict.json").read_text())
  return summary, verdict


def test_default_study_counts_and_verdict_are_its_committed_files():
  summary, verdict = _default()
  defined = summary.xs("all", level="group")["n_defined"]
  others = defined.drop("contrastive")
  assert others.nunique() == 1, "the prose says one count for every configuration but contrastive"
  n, n_contrastive = int(others.iloc[0]), int(defined["contrastive"])
  nodes = int(summary.xs("all", level="group")["n_nodes"].max())
  questions = int(summary.xs("all", level="group")["n_questions"].max())
  count = f"{n} defined nodes per configuration (contrastive {n_contrastive}) over {questions} questions"
  _says("README.md", count)
  _says("docs/results.md", count, f"{n} defined nodes of {nodes} per configuration (contrastive {n_contrastive}")
  solution = summary.loc["solution"]
  _says("docs/results.md", f"{int(solution.loc['correct', 'n_defined'])} of {int(solution.loc['correct', 'n_nodes'])}"
        f" on correct rollouts and {int(solution.loc['incorrect', 'n_defined'])} of "
        f"{int(solution.loc['incorrect', 'n_nodes'])} on incorrect ones (`solution`)")
  incorrect = summary.xs("incorrect", level="group")["n_defined"]
  _says("docs/results.md", f"the incorrect group ({int(incorrect.min())}-{int(incorrect.max())} defined nodes per "
        "configuration)")
  # The verdict: the README quotes its line's head and the questions its two ends would need.
  line = verdict["line"]
  head = re.match(r"(.*?undecided against \w+: \w+ \(~\d+ questions to detect [0-9.]+)", line).group(1)
  last = re.findall(r"(\w+) \(~(\d+) questions to detect", line)[-1]
  underpowered = re.search(r"(UNDERPOWERED on incorrect nodes \(\w+: \d+ questions with a defined alignment, "
                           r"need \d+\))", line).group(1)
  _says("README.md", f"`{head}), ..., {last[0]} (~{last[1]} ...); {underpowered}`")
  _says("docs/results.md", line)
  # The intervals against the best, the widest of the best-shared ones and the contrastive's, and the power.
  comps = [c for c in verdict["comparisons"] if c["comparable"]]
  most = max(c["n_shared_questions"] for c in comps)
  wide = [c for c in comps if c["n_shared_questions"] == most]
  few = min(comps, key=lambda c: c["n_shared_questions"])
  _says("docs/results.md", f"span [{min(c['ci_lo'] for c in wide):+.2f}, {max(c['ci_hi'] for c in wide):+.2f}] "
        f"({most} shared questions) to the whole [{few['ci_lo']:g}, {few['ci_hi']:g}] ({few['config_id']}, "
        f"{few['n_shared_questions']} shared questions)",
        f"detects with 80% power is {verdict['power']['detectable_difference']:.2f}")


def test_default_study_time_work_and_stages_are_its_manifest():
  manifest = json.loads((DEFAULT / "manifest.json").read_text())
  t, w = manifest["timings_s"], manifest["work"]
  _says("docs/results.md", f"loading {t['load_s']:.0f} s, base rollouts {t['rollouts_s']:.0f} s, scoring "
        f"{t['scoring_s']:.0f} s, continuations {t['continuations_s']:.0f} s",
        f"{w['base_rollouts']:,} base rollouts, {w['scored_tokens']:,} scored tokens, {w['continuations']:,} "
        f"continuations of {w['continuation_tokens']:,} tokens")


def test_default_study_means_are_its_summary():
  summary, _ = _default()
  for config in ("external", "summary", "solution"):          # "external (the 1.5B) has mean alignment 0.603 [...]"
    row = summary.loc[(config, "all")]
    ci = _ci(row["mean_alignment"], row["alignment_ci_lo"], row["alignment_ci_hi"], ".3f")
    assert re.search(rf"\b{config}\b[^\[\]]{{0,40}} {re.escape(ci)}", _text("docs/results.md")), (config, ci)
  for config, spec in (("solution", "self:solution:reverse_kl"),
                       ("external", "qwen2.5-coder-1.5b-instruct:plain:reverse_kl")):   # experiment 3's table
    row = summary.loc[(config, "all")]
    _row("docs/results.md", f"| {spec} | {_ci(row['mean_alignment'], row['alignment_ci_lo'], row['alignment_ci_hi'])}"
         " | 1e-4 |")


def test_default_study_time_and_memory_are_its_measurement():
  """Wall, CPU-seconds and peak RSS as /usr/bin/time -v measured them (docs/data/default_study/time.txt), with the
  host's load the README states beside them."""
  time_ = _time(DEFAULT / "time.txt")
  for path in ("README.md", "docs/results.md"):
    _says(path, f"{time_['wall']} wall, {time_['cpu']:.0f} CPU-s, peak RSS {time_['rss']:.1f} GB")


def _time(path: pathlib.Path) -> dict:
  """Wall clock ("8 min 12 s" / "44.8 s"), CPU-seconds (user + sys) and peak RSS in GB of a /usr/bin/time -v
  output."""
  text = path.read_text()
  get = lambda key: re.search(rf"{re.escape(key)}: (.+)", text).group(1).strip()
  parts = [float(p) for p in get("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")]
  seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
  wall = (f"{seconds:.1f} s" if seconds < 60 else
          f"{int(seconds // 60)} min {round(seconds % 60)} s")
  return {"wall": wall, "cpu": float(get("User time (seconds)")) + float(get("System time (seconds)")),
          "rss": int(get("Maximum resident set size (kbytes)")) * 1024 / 1e9}


def test_smoke_time_is_its_measurement():
  time_ = _time(DATA / "smoke" / "time.txt")
  _says("README.md", f"{time_['wall']} wall, {time_['cpu']:.0f} CPU-s, peak RSS {time_['rss']:.2f} GB")


# ------------------------------------------------------------------------------------------------------------
# Time estimates: one model, the dry run's (item 4).

def test_the_docs_quote_the_dry_runs_estimate():
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  from opd_jax.study import planning  # pylint: disable=g-import-not-at-top
  default, hour = planning.estimate_text(teacher_sweep.get_config()), planning.estimate_text(
      teacher_sweep.get_config("hour"))
  source = "the dry run's estimate, planning.estimate_text"
  _says("README.md", f"`--dry_run` estimates the default study at {default}",
        f"`:hour` (up to 80 questions, looks at 20/40/60, R = 12; "
        f"{planning.estimate_text(teacher_sweep.get_config('hour'), first_use=False)} by the dry run;", source=source)
  _says("configs/teacher_sweep.py", f"for the default, {default};", f"for `:hour` to its cap, {hour}.", source=source)
  _says("docs/results.md", f"The dry run's estimate, {default}", source=source)
  assert planning.ASSUMPTIONS in planning.plan(teacher_sweep.get_config(), cache="warm").describe().replace(
      "\n         ", " ")


# ------------------------------------------------------------------------------------------------------------
# The validation experiment (docs/data/validation/).

VALIDATION = DATA / "validation"


def test_validation_training_table_is_runs_csv():
  runs = pd.read_csv(VALIDATION / "runs.csv")
  for r in runs.itertuples():
    row = _row("docs/results.md", f"| {r.configuration} (", contains="GiB |")
    cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
    assert cells[1:3] == [f"{r.before:.3f}", f"{r.after:.3f}"], row
    assert cells[3].startswith(_ci(r.diff, r.lo, r.hi)), row          # cells[3] without its leading "**"
    assert cells[4].startswith(f"{r.wall_s / 60:.1f} min") and cells[5] == f"{r.peak_rss_gb:.2f} GiB", row
  # The README's line on v1: the base, the external runs' gains, the self contexts' end.
  external = runs[runs.spec.str.startswith("qwen")]
  own = runs[runs.spec.str.startswith("self")]
  assert runs.before.nunique() == 1 and (own.after == 0).all()
  _says("README.md", f"held-out pass@1 {runs.before.iloc[0]:.3f} before) held one bit: the 1.5B teacher gained "
        f"({external['diff'].min():+.2f} to {external['diff'].max():+.2f}), all {WORDS[len(own)]} self contexts "
        "fell to "
        f"{0:.3f}")


WORDS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


PREDICTORS = {
    "mean alignment, incorrect nodes (the default verdict's estimand)": "alignment_incorrect",
    "mean alignment, all nodes": "alignment_all",
    "mean alignment, correct nodes": "alignment_correct",
    "fraction of correct nodes with alignment > 0 (sign only)": "positive_fraction_correct",
    "projection <g*, g_D>/|g_D|, incorrect nodes": "projection_incorrect",
    "teacher advantage, all nodes": "teacher_advantage",
    "mean alignment at the first token (hypothesis.md)": "alignment_first",
    "teacher advantage at the first token (hypothesis.md)": "teacher_advantage_first",
    "- mean KL(p || q) over tokens (reverse)": "minus_kl_pq",
    "- mean KL(q || p) over tokens (forward)": "minus_kl_qp",
    "- mean JS over tokens": "minus_js",
    "top-k overlap of p and q": "topk_overlap",
    "the default verdict's ranking": "verdict_ranking",
    "reference: external teacher (1) or self (0), no study": "reference_external_teacher",
    "reference: the sign of the measured gain": "reference_gain_sign",
}


def test_validation_predictor_and_regret_tables_are_their_csvs():
  table = pd.read_csv(VALIDATION / "predictors.csv").set_index("predictor")
  heldout = pd.read_csv(VALIDATION / "predictors_heldout.csv").set_index("predictor")
  interval = r"[+-]\d\.\d\d \[[+-]\d\.\d\d, [+-]\d\.\d\d\]"
  for label, key in PREDICTORS.items():
    p, h = table.loc[key], heldout.loc[key]
    want = [_ci(p.spearman, p.spearman_lo, p.spearman_hi, "+.2f"), _ci(p.kendall, p.kendall_lo, p.kendall_hi, "+.2f"),
            _ci(p.spearman_minus_verdicts, p.spearman_minus_verdicts_lo, p.spearman_minus_verdicts_hi, "+.2f"),
            _ci(h.spearman, h.spearman_lo, h.spearman_hi, "+.2f")]
    assert re.findall(interval, _row("docs/results.md", f"| {label} |")) == want, label
  for r in pd.read_csv(VALIDATION / "regret.csv").itertuples():
    target = f"{r.target} (default)" if r.default else r.target
    want = (f"| {target} | {r.named} | {r.gain:+.3f} | {_ci(r.regret, r.regret_lo, r.regret_hi)} | "
            f"{r.could_be_best.replace(';', ', ')} | {r.could_be_best_worst_gain:+.3f} |")
    assert want in _lines("docs/results.md"), want


def test_sequential_replay_figures_are_its_csv():
  replay = pd.read_csv(VALIDATION / "sequential_replay.csv")

  def decided(target, configurations):
    rows = replay[(replay.target == target) & (replay.configurations == configurations) & replay.decided]
    r = rows.iloc[0]
    return r, re.search(r"= ([+-][\d.]+ \[[^\]]+\])", r.line).group(1)

  r, ci = decided("incorrect", "external,misleading")          # the line's figures as it prints them
  _says("docs/results.md", f"at look {r.look} ({r.questions} questions) on incorrect nodes ({ci})")
  r, ci = decided("correct", "external,misleading")
  _says("docs/results.md", f"at look {r.look} ({r.questions} questions) on correct nodes ({ci})")
  r, ci = decided("correct", "external,solution")
  assert r.decision == "use" and r.look == replay.look.max()
  _says("docs/results.md", f"decided at the cap ({ci})")
  assert not replay[(replay.target == "incorrect") & (replay.configurations == "external,solution")].decided.any()


# ------------------------------------------------------------------------------------------------------------
# The one-hour study with looks and with the futility stop (docs/data/hour_sequential/).

HOUR = DATA / "hour_sequential"


def test_hour_looks_table_and_futility_comparison_are_their_json():
  looks, futile = (json.loads((HOUR / f).read_text()) for f in ("looks.json", "futility.json"))
  for i, look in enumerate(looks["looks"], 1):
    pair = re.search(r"\((\w+ - \w+ = [+-][\d.]+ \[[^\]]+\]);", look["line"]).group(1)
    alpha = re.search(r"alpha spent ([0-9.e-]+) of", look["line"]).group(1)
    start = rf"\| {i}( \(cap\))? \| {look['questions']} \| "
    row = next(line for line in _lines("docs/results.md") if re.match(start, line))
    assert f"| {pair} |" in row and row.endswith(f"| {alpha} |"), (row, pair, alpha)
  fixed, fut = looks["work"], futile["work"]
  _says("docs/results.md", f"{fixed['continuations']:,} continuations, {fixed['continuation_tokens']:,} continuation "
        "tokens (`manifest.json` work)")
  for name, label in (("continuations", "continuations"), ("continuation_tokens", "continuation tokens")):
    ratio = fut[name] / fixed[name]
    assert re.search(rf"^\| {label} \| {fixed[name]:,} \| {fut[name]:,} \| (\*\*)?{ratio:.3f}(\*\*)? \|$",
                     "\n".join(_lines("docs/results.md")), re.M), label
  _says("docs/results.md", f"| base rollouts, scored tokens | {fixed['base_rollouts']:,}, "
        f"{fixed['scored_tokens']:,} | "
        f"{fut['base_rollouts']:,}, {fut['scored_tokens']:,} | {fut['base_rollouts'] / fixed['base_rollouts']:.2g}, "
        f"{fut['scored_tokens'] / fixed['scored_tokens']:.3f} |")
  line = futile["looks"][0]["line"]
  p = re.search(r"P\(decided by the cap of (\d+) questions\) = ([0-9.]+)", line)
  needs = dict((name, n) for name, n in re.findall(r"(\w+) \(~(\d+) questions", line))
  wall = re.match(r"(\d+) min (\d+) s", futile["wall"])
  _says("docs/results.md", f"**{wall.group(1)} min {wall.group(2)} s** wall",
        f"P(decided by the cap of {p.group(1)} questions) = {p.group(2)} < 0.1",
        f"(external ~{needs['external']}, summary ~{needs['summary']} at the margin 0.05)")
  minutes = round(int(wall.group(1)) + int(wall.group(2)) / 60)
  _says("README.md", f"it stopped for futility at {futile['questions_selected']}, undecided, in {minutes} min")


# ------------------------------------------------------------------------------------------------------------
# Futility calibration (docs/data/futility/) and the cross-fitted ratio on the exact toys (docs/data/crossfit/).

def test_futility_table_is_its_jsonl():
  runs = {name: [json.loads(line) for line in (DATA / "futility" / f"{name}.jsonl").read_text().splitlines()
                 if '"mu"' in line] for name in ("none", "f0.05", "f0.1")}       # the first line: the command
  assert len(runs["none"]) == len(runs["f0.1"]) == 14
  for a, b, c in zip(runs["none"], runs["f0.05"], runs["f0.1"]):
    assert a["mu"] == b["mu"] == c["mu"] and a["nodes"] == c["nodes"]
    truth = ", ".join(f"{m:g}" for m in a["mu"])
    want = (f"| {truth} | {a['nodes']} | {a['right']:.3f} / {b['right']:.3f} / {c['right']:.3f} | "
            f"{a['mean_questions']:.1f} / {b['mean_questions']:.1f} / {c['mean_questions']:.1f} | "
            f"{c['decisions'].get('futile', 0):.3f} | {c['fwer_flags']:.3f} | {c['false_use']:.3f} | "
            f"{c['false_equivalent']:.3f} | {c['coverage']:.3f} |")
    assert want in _lines("docs/results.md"), want


def test_crossfit_table_is_its_json():
  rows = pd.DataFrame(json.loads((DATA / "crossfit" / "toys_r2-64_draws4000.json").read_text())["rows"])
  for r, part in rows.groupby("r"):

    def largest(frame):
      top = frame.loc[frame.bias.abs().idxmax()]
      return f"{abs(top.bias):.{3 if abs(top.bias) > 0.01 else 4}f} ({top.mc_se:.4f})"

    ratio = part[part.estimator == "alignment_ratio"]
    want = (f"| {r} | {largest(part[part.estimator == 'mean_alignment'])} | {largest(ratio)} | "
            f"{largest(ratio[ratio.teacher.str.contains(' - ')])} |")
    assert want in _lines("docs/results.md"), want


def test_validation_v2_stage1_figures_are_runs_csv():
  """README's stage-1 sentence: each frozen self run's paired difference (the first with its interval) and v1's
  moving teacher's, from docs/data/validation_v2/runs.csv and stage1.csv."""
  runs = pd.read_csv(DATA / "validation_v2" / "runs.csv").set_index("configuration")
  stage1 = pd.read_csv(DATA / "validation_v2" / "stage1.csv").set_index("configuration")
  s = runs.loc["s1_solution_frozen"]
  phrases = [f"solution {_ci(s['diff'], s.lo, s.hi)}"]
  phrases += [f"{c} {_f(runs.loc[f's1_{c}_frozen', 'diff'], '+.3f')}" for c in ("summary", "answer")]
  moving = set(stage1.loc[[f"s1_{c}_frozen" for c in ("solution", "summary", "answer")], "v1_diff"].round(3))
  assert len(moving) == 1
  phrases.append(f"moving: {_f(moving.pop(), '+.3f')} each")
  _says("README.md", *phrases, source="docs/data/validation_v2/runs.csv and stage1.csv")
