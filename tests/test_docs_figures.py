"""The figures README.md, docs/results.md and configs/teacher_sweep.py quote from a run are those of the run's
committed result files (issue 50, item 3): each test reads the file under docs/data/ a figure came from, formats
the figure as the prose writes it and asserts the prose says exactly that, so a rerun that changes a number fails
here instead of leaving the prose wrong. Wall-time estimates are the dry run's (`study.planning.estimate_text`,
item 4); measured wall times come from a committed measurement that names its host and load. A figure whose run's
files were not kept is labelled where it stands (MARKER), and the last test fails a section of either doc that has
neither a checked figure nor that label. Files only: no model runs, no timing."""
import json
import pathlib
import re

import pandas as pd
import scipy.stats

REPO = pathlib.Path(__file__).resolve().parents[1]
DATA = REPO / "docs" / "data"


def _text(path: str) -> str:
  """The file's text with every run of whitespace (line wraps included) one space: prose wraps anywhere."""
  return re.sub(r"\s+", " ", (REPO / path).read_text())


def _lines(path: str) -> list[str]:
  return (REPO / path).read_text().splitlines()


# Every phrase a check found in a doc, (path, phrase): test_every_section_has_a_checked_figure_or_says_it_has_none
# runs the checks and places each phrase in its section.
CHECKED: list[tuple[str, str]] = []


def _says(path: str, *phrases: str, source: str = "its committed result file"):
  text = _text(path)
  for phrase in phrases:
    assert phrase in text, f"{path} should say {phrase!r} (from {source}); update the prose"
    CHECKED.append((path, phrase))


def _row(path: str, start: str, contains: str = "") -> str:
  """The one table row of `path` that starts with `start` (and holds `contains`)."""
  rows = [line for line in _lines(path) if line.startswith(start) and contains in line]
  assert len(rows) == 1, f"{path}: {len(rows)} table rows start with {start!r} and hold {contains!r}"
  CHECKED.append((path, rows[0]))
  return rows[0]


def _has_line(path: str, line: str):
  """`path` has `line` as one whole line (a table row)."""
  assert line in _lines(path), f"{path} should have the line {line!r}; update the prose"
  CHECKED.append((path, line))


def _row_matching(path: str, pattern: str) -> str:
  """The one line of `path` that `pattern` matches at its start (a table row)."""
  rows = [line for line in _lines(path) if re.match(pattern, line)]
  assert len(rows) == 1, f"{path}: {len(rows)} lines match {pattern!r}"
  CHECKED.append((path, rows[0]))
  return rows[0]


def _search(path: str, pattern: str) -> re.Match:
  """The first match of `pattern` in `path`'s whitespace-normalised text."""
  match = re.search(pattern, _text(path))
  assert match, f"{path} should match {pattern!r}; update the prose"
  CHECKED.append((path, match.group(0)))
  return match


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
  # The verdict: its line (README and results.md), and the questions its two ends would need (README).
  line = verdict["line"]
  against = next(d for d in verdict["details"] if d.startswith("undecided against "))
  first = re.match(r"(undecided against \w+: \w+ \(~\d+ questions to detect [0-9.]+)", against).group(1)
  last = re.findall(r"(\w+) \(~(\d+) questions to detect", against)[-1]
  from opd_jax.report import common  # pylint: disable=g-import-not-at-top
  on = common.on_nodes(verdict["target"])
  assert verdict["target"] == _default_target() and on in line
  _says("README.md", f"its verdict ({on}, the default) reads `{line}`, `{first}), ..., {last[0]} (~{last[1]} ...)`")
  _says("docs/results.md", line, against)
  # The intervals against the best (every comparison on the same questions, as the prose says), the best's and the
  # lowest's means, and the power.
  comps = [c for c in verdict["comparisons"] if c["comparable"]]
  shared = {c["n_shared_questions"] for c in comps}
  assert len(comps) == len(verdict["comparisons"]) and len(shared) == 1, "the prose says one count for all"
  rank = {r["config_id"]: r for r in verdict["ranking"]}
  low = min(verdict["ranking"], key=lambda r: r["mean_alignment"])
  mean = lambda r: f"{r['mean_alignment']:.3f} [{r['ci_lo']:.3f}, {r['ci_hi']:.3f}]"
  _says("docs/results.md", f"the paired intervals of each minus {verdict['best']} (the highest mean, "
        f"{mean(rank[verdict['best']])}; {low['config_id']} the lowest, {mean(low)}: "
        f"{100 * verdict['level']:g}% cluster bootstrap over questions, as stdout prints them) span "
        f"[{min(c['ci_lo'] for c in comps):+.2f}, {max(c['ci_hi'] for c in comps):+.2f}] ({shared.pop()} shared "
        f"questions each)", f"detects with 80% power is {verdict['power']['detectable_difference']:.2f}")
  assert max(r["mean_alignment"] for r in verdict["ranking"]) == rank[verdict["best"]]["mean_alignment"]


def _default_target() -> str:
  """The verdict's default node group, config.report.target of configs/base.py (the default study's)."""
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  return teacher_sweep.get_config().report.target


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
    _search("docs/results.md", rf"\b{config}\b[^\[\]]{{0,40}} {re.escape(ci)}")
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
    _has_line("docs/results.md", want)


def _exp(x: float) -> str:
  """A tiny loss as the prose writes it: 2e-9."""
  return re.sub(r"e-0*", "e-", f"{x:.0e}")


def test_validation_prose_is_its_csvs():
  """The sentences around the validation tables: each run's wall time, peak and last loss (runs.csv), the
  verdict's could-be-best set and detectable difference (study_verdict_line.txt), each configuration's predictor
  values (predictors.csv) and the study's nodes (study_nodes_*.csv)."""
  runs = pd.read_csv(VALIDATION / "runs.csv").set_index("configuration")
  wall = lambda c: f"{runs.wall_s[c] / 60:.1f} min ({runs.wall_s[c]:.0f} s"
  _says("docs/results.md", f"piece ran alone on the 2 cores in {wall('summary')}",
        f"its piece ran alone in {wall('external_fkl')})", f"end to end: {wall('external_jsd')}) alone on the 2 cores, "
        f"{runs.peak_rss_gb['external_jsd']:.2f} GiB peak",
        f"at {runs.peak_rss_gb['external_fkl']:.2f} GiB peak, over the 16 GiB one",
        f"({runs.wall_s['contrastive'] / 60:.1f} min alone, {runs.peak_rss_gb['contrastive']:.2f} GiB)",
        f"The external teacher's runs peaked {runs.peak_rss_gb['external'] - 16:.2f} GiB (reverse KL) and "
        f"{runs.peak_rss_gb['external_fkl'] - 16:.2f} GiB (forward KL) over the 16 GiB target",
        f"empty responses (loss {_exp(runs.last_loss['misleading'])} at step 40)",
        f"loss {runs.last_loss['answer']:.3f} at step 40", f"loss {_exp(runs.last_loss['contrastive'])} at step 40",
        f"the stop token alone (loss {_exp(runs.last_loss['solution'])}:")
  low = runs["diff"].min()
  gain = lambda c: f"{runs['diff'][c]:+.3f}"
  _says("docs/results.md", f"(n = {len(runs)} trained configurations, {WORDS[int((runs['diff'] == low).sum())]} of "
        f"them tied at {low:.3f}: every self context collapsed)",
        f"(JSD {gain('external_jsd')}, reverse KL {gain('external')}, forward KL {gain('external_fkl')}; the "
        "divergence is all that differs)")
  line = (VALIDATION / "study_verdict_line.txt").read_text()
  best = re.search(r"could be best: ([\w, ]+);", line).group(1).split(", ")
  detectable = float(re.search(r"at this budget: ([0-9.]+)", line).group(1))
  nodes = pd.concat([pd.read_csv(f) for f in sorted(VALIDATION.glob("study_nodes_*.csv"))])
  at = nodes[["question_id", "rollout_id", "position"]].drop_duplicates()
  _says("docs/results.md", f"(could be best: {WORDS[len(best)]} of {WORDS[nodes.config_id.nunique()]}; detectable "
        f"difference {detectable:.2f} at {nodes.question_id.nunique()} questions)",
        f"{(at.position == 0).mean():.0%} of the study's {len(at)} nodes are at the first token")
  value = pd.read_csv(VALIDATION / "predictors.csv").set_index("predictor").filter(like="value_").rename(
      columns=lambda c: c.removeprefix("value_"))
  correct, first, adv = value.loc["alignment_correct"], value.loc["alignment_first"], value.loc["teacher_advantage"]
  assert correct.external > correct.external_jsd > correct.external_fkl
  self_adv = adv[["solution", "answer", "summary"]]
  assert adv.external == adv.external_fkl == adv.external_jsd       # a view-level predictor: the same teacher view
  _says("docs/results.md", f"orders them reverse KL {correct.external:.3f} > JSD {correct.external_jsd:.3f} > "
        f"forward KL {correct.external_fkl:.3f}",
        f"(teacher advantage {self_adv.min():.3f}-{self_adv.max():.3f} for solution, answer and summary against "
        f"{adv.external:.3f} for the 1.5B teacher)",
        f"(mean alignment {first.solution:.2f} solution, {first.answer:.2f} answer, {first.misleading:.2f} "
        f"misleading)", f"reads {first.summary:+.2f}, above the 1.5B teacher ({first.external:+.2f})")
  for predictor in ("alignment_all", "alignment_incorrect", "alignment_correct", "alignment_first",
                    "teacher_advantage"):
    assert value.loc[predictor].idxmin() == "misleading", predictor   # "last on ... every node slice"
  first_adv = value.loc["teacher_advantage_first"]
  assert first_adv.idxmin() == "contrastive"
  _says("docs/results.md", f"(at the first token, `contrastive` reads {first_adv.contrastive:.3f} against its "
        f"{first_adv.misleading:.3f})")
  # The verdict on correct nodes is not committed: report.decision recomputes it from the committed node rows.
  from opd_jax.report import decision  # pylint: disable=g-import-not-at-top
  verdict = decision.decide(nodes, target="correct")
  top = next(c for c in verdict["comparisons"] if {c["config_id"], c["vs"]} == {"external", "external_jsd"})
  sign = 1 if top["config_id"] == "external" else -1
  lo, hi = sorted((sign * top["ci_lo"], sign * top["ci_hi"]))
  _says("docs/results.md", f"(external - external_jsd {_ci(sign * top['diff'], lo, hi)})")


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
    row = _row_matching("docs/results.md", start)
    assert f"| {pair} |" in row and row.endswith(f"| {alpha} |"), (row, pair, alpha)
  fixed, fut = looks["work"], futile["work"]
  _says("docs/results.md", f"{fixed['continuations']:,} continuations, {fixed['continuation_tokens']:,} continuation "
        "tokens (`manifest.json` work)")
  for name, label in (("continuations", "continuations"), ("continuation_tokens", "continuation tokens")):
    ratio = fut[name] / fixed[name]
    _search("docs/results.md", rf"\| {label} \| {fixed[name]:,} \| {fut[name]:,} \| (\*\*)?{ratio:.3f}(\*\*)? \|")
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
  _says("docs/results.md", f"{futile['wall'].split(', ')[1]}; `docs/data/hour_sequential/futility.json`")
  # The run to the cap: its code, date and sample, and what its last pairs would need.
  last = looks["looks"][-1]["line"]
  need = {name: int(n) for name, n in re.findall(r"(\w+) \(~(\d+) questions to detect 0.05", last)}
  hundreds = lambda n: f"{round(n, -2):,}"
  _says("docs/results.md", f"code at\n{looks['code']}, run {looks['date']}".replace("\n", " "),
        f"({looks['questions_selected']} informative questions of {looks['questions_sampled']} sampled)",
        f"the last pairs need ~{hundreds(need['summary'])}-{hundreds(need['external'])} questions "
        f"(\"~{need['external']} questions to detect 0.05\" at the cap)")
  assert max(need.values()) == need["external"] and sorted(need.values())[-2] == need["summary"]
  minutes = round(int(wall.group(1)) + int(wall.group(2)) / 60)
  _says("README.md", f"it stopped for futility at {futile['questions_selected']}, undecided, in {minutes} min")


# ------------------------------------------------------------------------------------------------------------
# Calibration in simulation (benchmarks/verdict_calibration.py): the sequential verdict's (docs/data/futility/),
# the futility rules' and the alignment ratio's at `:paper`'s design (docs/data/design/); the cross-fitted ratio
# on the exact toys (docs/data/crossfit/).

FUTILITY = DATA / "futility"


def _cells(path: pathlib.Path) -> list[dict]:
  """The simulated cells of a verdict_calibration.py output, in order (its first line is the command, its last
  the targets)."""
  return [json.loads(line) for line in path.read_text().splitlines() if '"mu"' in line]


def _rate(x: float) -> str:
  """A rate as the calibration tables write it: "0" or three decimals."""
  return "0" if x == 0 else f"{x:.3f}"


def _truth(cell: dict) -> str:
  return ", ".join(f"{m:g}" for m in cell["mu"])


def _futility_runs() -> dict[str, list[dict]]:
  runs = {name: _cells(FUTILITY / f"{name}.jsonl")
          for name in ("none", "f0.05", "f0.1", "current_trend_f0.1_calibration", "predictive_f0.1")}
  first = runs["none"]
  assert len(first) == 14 and [c["nodes"] for c in first] == ["unif15"] * 7 + ["geom40"] * 7
  for cells in runs.values():
    assert [(c["mu"], c["nodes"], c["sims"]) for c in cells] == [(c["mu"], c["nodes"], c["sims"]) for c in first]
  return runs


def test_futility_table_is_its_jsonl():
  runs = _futility_runs()
  for a, b, c in zip(runs["none"], runs["f0.05"], runs["f0.1"]):
    want = (f"| {_truth(a)} | {a['nodes']} | {a['right']:.3f} / {b['right']:.3f} / {c['right']:.3f} | "
            f"{a['mean_questions']:.1f} / {b['mean_questions']:.1f} / {c['mean_questions']:.1f} | "
            f"{c['decisions'].get('futile', 0):.3f} | {c['fwer_flags']:.3f} | {c['false_use']:.3f} | "
            f"{c['false_equivalent']:.3f} | {c['coverage']:.3f} |")
    _has_line("docs/results.md", want)


def test_sequential_calibration_table_is_the_futility_free_run():
  """The issue-33 table (looks 10/20/40/80, uniform / geometric nodes) is the first five cells of each node kind in
  futility/none.jsonl (the same seeds, futility off), its questions saved that file's `ratio` to the fixed design
  with the same rate of right decisions."""
  cells = _futility_runs()["none"]
  uniform, geometric = cells[:7], cells[7:]
  for u, g in zip(uniform[:5], geometric[:5]):
    both = lambda key, f=_rate: f"{f(u[key])} / {f(g[key])}"
    _has_line("docs/results.md", f"| {_truth(u)} | {both('fwer_flags')} | {both('false_use')} | "
              f"{both('false_equivalent')} | {both('coverage', lambda x: f'{x:.3f}')} | "
              f"{both('right', lambda x: f'{x:.2f}')} | {both('mean_questions', lambda x: f'{x:.1f}')} |")
  by_truth = lambda cells: {_truth(c): c["ratio"] for c in cells}
  u, g = by_truth(uniform), by_truth(geometric)
  alike = [r for cells in (u, g) for t, r in cells.items() if t in ("0, 0", "0, 0, 0", "0.5, 0.25, 0")]
  _says("docs/results.md", f"used {u['0.5, 0']:.2f} / {g['0.5, 0']:.2f} of its questions for a difference of 0.5, "
        f"{u['0.3, 0']:.2f} / {g['0.3, 0']:.2f} for 0.3, and {min(alike):.2f}-{max(alike):.2f} when the "
        "configurations are equal or graded")


def test_futility_bullets_are_its_jsonl():
  """What futility 0.05 and 0.1 (the current-trend rule) cost and save, from the table's three files."""
  runs = _futility_runs()
  none, f05, f1 = runs["none"], runs["f0.05"], runs["f0.1"]
  cap = none[0]["looks"][-1]
  close = [i for i, c in enumerate(none) if len(c["mu"]) == 6]          # the six close configurations
  lost = lambda run: [a["right"] - b["right"] for a, b in zip(none, run)]
  q = lambda run, i: run[i]["mean_questions"]
  _says("docs/results.md", f"futility 0.1 stops at {q(f1, close[0]) / cap:.2f} / {q(f1, close[1]) / cap:.2f} of the "
        f"cap on average ({q(f1, close[0]):.1f} and {q(f1, close[1]):.1f} of {cap} questions) instead of 1.0, and "
        f"loses {_rate(lost(f1)[close[0]])} / {_rate(lost(f1)[close[1]])} of its right decisions")
  elsewhere = [(x, i) for i, x in enumerate(lost(f1)) if i not in close]
  worst, i = max(elsewhere)
  assert none[i]["mu"] == [0, 0, 0] and none[i]["nodes"] == "geom40"    # as the prose names it
  futile = f1[i]["decisions"]["futile"]
  calibrated = runs["current_trend_f0.1_calibration"][i]["futile_decided_at_cap"]
  _says("docs/results.md", f"costs {_rate(min(x for x, _ in elsewhere))}-{worst:.3f} of right decisions (largest: "
        f"three equal configurations, geometric nodes, {none[i]['right']:.3f} to {f1[i]['right']:.3f}, with "
        f"{q(f1, i) / cap:.2f} of the questions)",
        f"about {worst / futile:.0%} ({worst:.3f} / {futile:.3f}; run on to the cap, {calibrated:.3f})",
        f"A threshold of 0.05 loses less ({_rate(min(lost(f05)))}-{max(lost(f05)):.3f}) and saves less "
        f"({q(f05, close[0]):.1f} and {q(f05, close[1]):.1f} questions where the cap cannot decide)")


def test_futility_rules_table_is_their_jsonl():
  """The current-trend and the predictive rule side by side, every futile stop run on to the cap
  (futility/current_trend_f0.1_calibration.jsonl, futility/predictive_f0.1.jsonl): the stops pooled over the 14
  cells, the stated probability's and the decided share's means over them."""
  runs = _futility_runs()
  trend, predictive = runs["current_trend_f0.1_calibration"], runs["predictive_f0.1"]
  assert [c["decisions"] for c in trend] == [c["decisions"] for c in runs["f0.1"]]   # the table's f0.1, rerun

  def pooled(cells):
    stops = [c["decisions"].get("futile", 0) * c["sims"] for c in cells]
    mean = lambda key: sum(s * (c[key] or 0) for s, c in zip(stops, cells)) / sum(stops)
    return round(sum(stops)), mean("futile_mean_p"), mean("futile_decided_at_cap")

  (n_t, p_t, d_t), (n_p, p_p, d_p) = pooled(trend), pooled(predictive)
  _has_line("docs/results.md", f"| current trend (before) | {n_t} | {p_t:.3f} | {d_t:.3f} |")
  _has_line("docs/results.md", f"| predictive (now) | {n_p} | {p_p:.3f} | {d_p:.3f} |")
  _says("docs/results.md", f"futile stops ({len(trend)} cells x {trend[0]['sims']})",
        f"(it says {p_p:.3f} where {d_p:.3f} happened); the current-trend one said {p_t:.3f} where {d_t:.3f} "
        f"happened ({d_t / p_t:.1f} times)")
  gains = [b["right"] - a["right"] for a, b in zip(trend, predictive)]
  assert min(gains) >= 0, "the prose says right decisions are the same or higher in every cell"
  i = gains.index(max(gains))
  assert trend[i]["mu"] == [0, 0, 0] and trend[i]["nodes"] == "geom40"
  _says("docs/results.md", f"(largest gain: three equal configurations, geometric nodes, {trend[i]['right']:.3f} to "
        f"{predictive[i]['right']:.3f}); the error rates do not change (wrong flags <= "
        f"{max(c['fwer_flags'] for c in predictive):.3f}, false \"use\" <= "
        f"{max(c['false_use'] for c in predictive):.3f}, coverage >= {min(c['coverage'] for c in predictive):.3f})")
  cap = trend[0]["looks"][-1]
  close = [i for i, c in enumerate(trend) if len(c["mu"]) == 6]
  frac = lambda cells: " / ".join(f"{cells[i]['mean_questions'] / cap:.2f}" for i in close)
  _says("docs/results.md", f"six close configurations stop at {frac(predictive)} of the cap "
        f"({predictive[close[0]]['mean_questions']:.1f} and {predictive[close[1]]['mean_questions']:.1f} of {cap} "
        f"questions, uniform / geometric nodes) instead of {frac(trend)}")


def _wilson(rate: float, n: int) -> str:
  """`rate` of `n` draws with its 95% Wilson interval (statsmodels' reference, not the study's code)."""
  from statsmodels.stats.proportion import proportion_confint  # pylint: disable=g-import-not-at-top
  lo, hi = proportion_confint(round(rate * n), n, method="wilson")
  return f"{_rate(rate)} [{_rate(round(lo, 3))}, {_rate(round(hi, 3))}]"


def test_ratio_calibration_table_is_its_jsonl():
  """The sequential verdict on the alignment ratio at `:paper`'s design (design/ratio_calibration_s1000.jsonl):
  each cell's rates with Wilson intervals over its draws, and the bullets' extremes."""
  cells = _cells(DATA / "design" / "ratio_calibration_s1000.jsonl")
  cap = cells[0]["looks"][-1]
  for c in cells:
    n = c["sims"]
    cols = [_wilson(c[k], n) for k in ("fwer_flags", "false_use", "false_equivalent", "coverage")]
    cols += [_rate(c["right"]), f"{round(c['mean_questions'])} ({c['mean_questions'] / cap:.2f})"]
    _row("docs/results.md", f"| {_truth(c)} ", contains=" | " + " | ".join(cols) + " |")
  worst = max(cells, key=lambda c: c["false_use"])
  _says("docs/results.md", f"Rates over {cells[0]['sims']} simulated studies per cell",
        f"at most {max(max(c['fwer_flags'], c['false_use']) for c in cells):.3f}, false \"equivalent\" at most "
        f"{max(c['false_equivalent'] for c in cells):.3f}, coverage at least {min(c['coverage'] for c in cells):.3f}",
        f"its interval's upper end at {_wilson(worst['false_use'], worst['sims']).split(', ')[1][:-1]}",
        f"{worst['false_use_at'][str(cap)]} of its {sum(worst['false_use_at'].values())} false \"use\" came at the cap")
  first = cells[:3]
  _says("docs/results.md", "of the futile stops, " + " / ".join(f"{c['futile_decided_at_cap']:.3f}" for c in first)
        + " (first three cells) would have been decided at the cap, against a stated mean probability of "
        + " / ".join(f"{c['futile_mean_p']:.3f}" for c in first))
  stop = [c["mean_questions"] / cap for c in cells]
  _says("docs/results.md", f"the study runs fewer questions than the cap: {min(stop):.2f}-{max(stop):.2f} of it in "
        "the calibration below")
  big = _cells(DATA / "design" / "ratio_calibration_cell0_s4000.jsonl")[0]          # cell 0 again, at 4000 draws
  assert big["mu"] == cells[0]["mu"] and big["looks"] == cells[0]["looks"]
  _says("docs/results.md", f"false \"use\" (= the flags' family-wise error) {_wilson(big['false_use'], big['sims'])}, "
        f"coverage {_wilson(big['coverage'], big['sims'])}; {big['false_use_at'][str(cap)]} of its "
        f"{sum(big['false_use_at'].values())} false \"use\" came at the cap", f"({big['false_use']:.4f}, MC se")


def test_ratio_calibration_at_the_paper_design_now_is_its_jsonl():
  """The sequential verdict on the alignment ratio at `:paper`'s design now (ratio_calibration_paper131_s1000.jsonl):
  its looks and r the config's, each cell's rates with Wilson intervals, and the bullets' extremes."""
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  b = teacher_sweep.get_config("paper").budget
  cells = _cells(DATA / "design" / "ratio_calibration_paper131_s1000.jsonl")
  cap = cells[0]["looks"][-1]
  assert cells[0]["looks"] == [*b.looks, b.questions] and cells[0]["nodes"] == f"ratio_m28_r{b.continuations_per_candidate}"
  for c in cells:
    cols = [_wilson(c[k], c["sims"]) for k in ("fwer_flags", "false_use", "false_equivalent", "coverage")]
    cols += [_rate(c["right"]), f"{round(c['mean_questions'])} ({c['mean_questions'] / cap:.2f})"]
    _row("docs/results.md", f"| {_truth(c)} ", contains=" | " + " | ".join(cols) + " |")
  big = _cells(DATA / "design" / "ratio_calibration_paper131_cell0_s4000.jsonl")[0]      # cell 0 at 4000 draws
  assert (big["mu"], big["looks"], big["nodes"]) == (cells[0]["mu"], cells[0]["looks"], cells[0]["nodes"])
  _says("docs/results.md", f"`--seq_cells=0 --sims={big['sims']}`, {big['seconds']:.0f} s;",
        f"false \"use\" {_wilson(big['false_use'], big['sims'])}, coverage {_wilson(big['coverage'], big['sims'])}")
  r3 = json.loads((DATA / "crossfit" / "v2_blocks1234_subsampled_r3.json").read_text())
  ratio, proj = r3["alignment_ratio"], r3["projection"]
  _says("docs/results.md", f"--r=3,12 --draws={r3['draws']}", f"`, {r3['seconds']:.0f} s beside",
        f"R = 12 is {ratio['max_mean_shift']['3']:.4f} ({ratio['max_mean_shift_z']['3']:.2f} Monte Carlo",
        f"difference {ratio['max_diff_shift']['3']:.4f} (MC se {ratio['max_diff_shift_se']['3']:.4f})",
        f"in its own standard errors is {ratio['max_diff_shift_z']['3']:.2f}",
        f"exactly unbiased, shows {proj['max_diff_shift_z']['3']:.2f}",
        f"unchanged in {ratio['same_could_be_best']['3']:.2f} of the draws "
        f"({r3['alignment']['same_could_be_best']['3']:.2f} with the cosine)",
        source="docs/data/crossfit/v2_blocks1234_subsampled_r3.json")
  assert ratio["max_mean_shift"]["3"] <= 2 * ratio["shift_se"]["3"] and ratio["max_diff_shift"]["3"] <= 2 * ratio[
      "max_diff_shift_se"]["3"]
  off = _cells(DATA / "design" / "ratio_calibration_paper131_nofutility_s1000.jsonl")   # cells 2 and 3, no futility
  assert [c["mu"] for c in off] == [cells[2]["mu"], cells[3]["mu"]] and {c["futility"] for c in off} == {0.0}
  _says("docs/results.md", f"decided right {off[0]['right']:.3f} / {off[1]['right']:.3f} instead of "
        f"{cells[2]['right']:.3f} / {cells[3]['right']:.3f}", f"at {off[0]['mean_questions']:.0f} / "
        f"{off[1]['mean_questions']:.0f} questions on average instead of {cells[2]['mean_questions']:.0f} / "
        f"{cells[3]['mean_questions']:.0f}")
  four = cells[:4]
  _says("docs/results.md", f"false \"use\" are at most {max(max(c['fwer_flags'], c['false_use']) for c in cells):.3f}",
        f"coverage at least {min(c['coverage'] for c in cells):.3f} everywhere",
        f"decided in {cells[3]['right']:.3f} of studies",
        "of the futile stops, " + " / ".join(f"{c['futile_decided_at_cap']:.3f}" for c in four) + " (first four cells) "
        "would have been decided at the cap, against a stated mean probability of "
        + " / ".join(f"{c['futile_mean_p']:.3f}" for c in four))


def test_variance_split_and_paper_design_are_the_pilot_and_config():
  """The pilot's split (variance_split/validation.json: within-question over question variance per pair) and the
  design `:paper` runs (configs/teacher_sweep.py), as the design table's rows state them."""
  pilot = json.loads((DATA / "variance_split" / "validation.json").read_text())
  ratios = {pair: v["within"] / v["question"] for pair, v in pilot["pairs"].items()}
  hardest = max(ratios, key=ratios.get)
  _says("docs/results.md", f"--out=docs/data/variance_split/validation.json` ({len(ratios)} pairs)",
        f"(their ratio {min(ratios.values()):.1f}-{max(ratios.values()):.0f} over the pairs, median "
        f"{pd.Series(ratios).median():.1f})", f"{hardest}, within / question = {ratios[hardest]:.0f})",
        f"incorrect nodes): `python benchmarks/variance_split.py --estimand={pilot['estimand']} --r={pilot['r']:g}")
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  paper, fixed = teacher_sweep.get_config("paper"), teacher_sweep.get_config("paper_fixed")
  assert tuple(paper.budget.precision_of) == (fixed.budget.questions, fixed.budget.nodes_per_rollout,
                                              fixed.budget.continuations_per_candidate)
  b = paper.budget
  _row("docs/results.md", "| fixed (`:paper_fixed`) ", contains=f"| {fixed.budget.questions} | "
       f"{fixed.budget.nodes_per_rollout} | {fixed.budget.continuations_per_candidate} |")
  _says("docs/results.md", f"looks at {', '.join(map(str, b.looks[:-1]))} and {b.looks[-1]} of {b.questions} "
        f"questions, futility {b.futility:g}, margin {paper.report.min_effect:g}")


def test_the_paper_design_is_its_dry_run_and_its_cap_the_shortfalls():
  """docs/results.md's "`:paper` now" and README's `:paper` hours: the designs and hours of the committed dry run
  (variance_split/paper_dry_run.txt), the config's nodes and r those of the chosen design and its cap the questions
  the group shortfall needs (paper_shortfall.json), the bootstrap of paper_v2_criteria.csv."""
  from configs import teacher_sweep  # pylint: disable=g-import-not-at-top
  b = teacher_sweep.get_config("paper").budget
  lines = (DATA / "variance_split" / "paper_dry_run.txt").read_text()
  every = re.search(r"on every pair: (\d+) questions, nodes_per_rollout (\d+), r = (\d+): ([\d.]+) h", lines).groups()
  chosen = re.search(r"on every pair floored .*?: (\d+) questions, nodes_per_rollout (\d+), r = (\d+): ([\d.]+) h",
                     lines).groups()
  hours = re.search(r"hours for R=64's precision: ([\d.]+) \(([\d.]+) of the fixed design's ([\d.]+) h; every pair "
                    r"floored at 0.0125, node rollouts from the verdict's group only\)", lines).groups()
  own = re.search(r"\(([\d.]+) h for (\d+) questions\)", lines).groups()
  worst = re.search(r"this config runs (\d+) questions, nodes_per_rollout (\d+), R = (\d+): its variance is ([\d.]+)x",
                    lines).groups()
  assert (int(chosen[1]), int(chosen[2])) == (b.nodes_per_rollout, b.continuations_per_candidate) and int(
      own[1]) == int(worst[0]) == b.questions and chosen[3] == hours[0]
  short = json.loads((DATA / "variance_split" / "paper_shortfall.json").read_text())
  assert short["questions_needed_at_expected"] == b.questions and short["questions_needed_at_full_group"] == int(
      chosen[0]) and f"{short['worst_at_full_group']:.3g}" == worst[3]
  _row("docs/results.md", "| every pair, group only ", contains=f"| 4 of 4 | {every[0]} | {every[1]} | {every[2]} | "
       f"{every[3]} | {float(every[3]) / float(hours[2]):.3f} |")
  _row("docs/results.md", "| **every pair floored, group only (`:paper`)** ", contains=f"| 4 of 4 | {chosen[0]} | "
       f"{chosen[1]} | {chosen[2]} | **{chosen[3]}** | **{hours[1]}** |")
  crit = pd.read_csv(DATA / "variance_split" / "paper_v2_criteria.csv").set_index("criterion")
  fl, ev = crit.loc["every pair, floored"], crit.loc["every pair"]
  assert fl["boot_share_at_most_0.1"] == 1.0
  assert (fl.questions, fl.nodes_per_rollout, fl.r) == tuple(map(int, chosen[:3]))
  _says("docs/results.md", f"`hours for R=64's precision: {hours[0]}` ({hours[1]} of the fixed design's {hours[2]} h)",
        f"On every pair at its own fixed-design standard error it is {every[3]} h",
        f"every pair floored costs {fl.boot_fraction_linear_median:.3f} of the fixed design's linear cost (5th-95th "
        f"percentiles {fl.boot_fraction_linear_p05:.3f}-{fl.boot_fraction_linear_p95:.3f}; the roofline's "
        f"{hours[1]} above), at most 0.1 in all {fl.boot} resamples; every pair, median "
        f"{ev.boot_fraction_linear_median:.2f} "
        f"({ev.boot_fraction_linear_p05:.2f}-{ev.boot_fraction_linear_p95:.2f})",
        f"the mean is {short['expected_in_group']:.2f}, and the design would need {b.questions} questions",
        f"(its variance {short['worst_at_full_group']:.3f} of the target on its worst pair at 4 per question, "
        f"{short['worst_at_expected']:.3f} at {short['expected_in_group']:.2f}):\n  {own[0]} h on the roofline"
        .replace("\n  ", " "), source="docs/data/variance_split/paper_*")
  rows = pd.concat([pd.read_parquet(f, columns=["question_id", "rollout_id", "correct"])
                    for f in sorted((DATA / "validation_v2").glob("study_records_*.parquet"))])
  per = rows[~rows.correct].groupby("question_id").rollout_id.nunique().value_counts().sort_index()
  assert list(per.index) == [1, 2, 3]
  _says("docs/results.md", f"1, 2\n  or 3 incorrect node rollouts ({per[1]}, {per[2]} and {per[3]} of {per.sum()})"
        .replace("\n  ", " "), source="docs/data/validation_v2/study_records_*.parquet")
  measured = re.search(r"at today's measured efficiencies .*?: ([\d.]+) h \(", lines).group(1)
  _says("docs/results.md", f"{measured} h at today's measured efficiencies (the dry\n  run's next line)".replace(
      "\n  ", " "), source="paper_dry_run.txt")
  _says("README.md", f"{hours[0]} H200-h for the precision of `:paper_fixed`, {hours[2]} h at R = 64, floored at "
        f"{0.25 * teacher_sweep.get_config('paper').report.min_effect:.4g}", source="paper_dry_run.txt")


def test_crossfit_table_is_its_json():
  rows = pd.DataFrame(json.loads((DATA / "crossfit" / "toys_r2-64_draws4000.json").read_text())["rows"])
  for r, part in rows.groupby("r"):

    def largest(frame):
      top = frame.loc[frame.bias.abs().idxmax()]
      return f"{abs(top.bias):.{3 if abs(top.bias) > 0.01 else 4}f} ({top.mc_se:.4f})"

    ratio = part[part.estimator == "alignment_ratio"]
    want = (f"| {r} | {largest(part[part.estimator == 'mean_alignment'])} | {largest(ratio)} | "
            f"{largest(ratio[ratio.teacher.str.contains(' - ')])} |")
    _has_line("docs/results.md", want)
  runs = json.loads((DATA / "crossfit" / "toys_r2-64_draws4000.json").read_text())
  two = rows[(rows.r == 2) & ~rows.teacher.str.contains(" - ")]
  sd = lambda estimator: two[two.estimator == estimator].sd.max()
  _says("docs/results.md", f"`python benchmarks/crossfit.py --draws={runs['draws']}`, {runs['seconds']:.0f} s",
        f"Its spread over draws at r = 2 (sd {sd('alignment_ratio'):.3f}) is "
        f"{sd('alignment_ratio') / sd('mean_alignment'):.1f} times that of the mean cosine ({sd('mean_alignment'):.3f})")


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
  slow = runs.loc["s1_solution_moving_lr3e-5"]                   # stage 1's fifth run: the moving teacher, lr 3e-5
  assert round(slow["diff"], 3) in moving and (slow.learning_rate, runs.loc["s1_solution_frozen"].learning_rate) == (
      3e-5, 1e-4)
  phrases.append(f"moving: {_f(moving.pop(), '+.3f')} each, at lr 1e-4 and at 3e-5")
  phrases.append(f"misleading (a wrong reference) {_f(runs.loc['s1_misleading_frozen', 'diff'], '+.3f')}")
  _says("README.md", *phrases, source="docs/data/validation_v2/runs.csv and stage1.csv")


# ------------------------------------------------------------------------------------------------------------
# Every section either quotes a figure the checks above read, or says where it stands that its figures are not.

MARKER = "not re-checked by tests/test_docs_figures.py"
# Sections that quote no figure from a run (what to install, how to call, where things are).
NO_RUN_FIGURES = {
    "README.md": ("opd_jax", "Your own models, budgets and configurations", "Closing the loop: the trainer",
                  "Multi-device and multi-host", "Layout", "Docs"),
    "docs/results.md": (),
}


def _sections(path: str) -> list[tuple[str, str]]:
  """(heading, whitespace-normalised body up to the next heading of any level) for every heading of `path`
  outside code blocks."""
  sections, fenced = [], False
  for line in _lines(path):
    fenced ^= line.startswith("```")
    if not fenced and re.match(r"#+ ", line):
      sections.append((line.lstrip("#").strip(), []))
    elif sections:
      sections[-1][1].append(line)
  return [(heading, re.sub(r"\s+", " ", "\n".join(body))) for heading, body in sections]


def test_every_section_has_a_checked_figure_or_says_it_has_none():
  """Runs the checks above and places each phrase they found in its section: a section of README.md or
  docs/results.md with none, and without MARKER ("... not re-checked by ...", the label of figures whose run's
  files were not kept), fails, so a new section must either quote a committed file's figures through a check here
  or say that it does not."""
  CHECKED.clear()
  for name, check in sorted(globals().items()):
    if name.startswith("test_") and name != "test_every_section_has_a_checked_figure_or_says_it_has_none":
      check()
  for path, exempt in NO_RUN_FIGURES.items():
    sections = _sections(path)
    headings = [heading for heading, _ in sections]
    for heading in exempt:
      assert heading in headings, f"{path}: NO_RUN_FIGURES names {heading!r}, which is no heading of it"
    for heading, body in sections:
      checked = [phrase for p, phrase in CHECKED if p == path and re.sub(r"\s+", " ", phrase) in body]
      assert checked or MARKER in body or heading in exempt, (
          f"{path}, section {heading!r}: no figure of it is checked by tests/test_docs_figures.py and it does not "
          f"say {MARKER!r}: check its figures against their committed files here, or label them where they stand")


def test_readme_is_at_most_250_lines():
  """Issue 50's bound: the README states what a newcomer needs; the rest lives in docs/."""
  assert len(_lines("README.md")) <= 250, f"README.md has {len(_lines('README.md'))} lines; move detail to docs/"


def test_the_design_from_the_pilot_with_rewards_is_its_dry_run():
  """docs/results.md's paragraph on the v2 pilot: the design and hours as its committed dry-run lines print them."""
  lines = (DATA / "variance_split" / "v2_block1_dry_run.txt").read_text()
  split = json.loads((DATA / "variance_split" / "v2_block1.json").read_text())
  design = re.search(r"every pair: (\d+) questions, nodes_per_rollout (\d+), r = (\d+): ([\d.]+) h", lines).groups()
  hours = re.search(r"hours for R=64's precision: ([\d.]+) \(([\d.]+) of the fixed design's ([\d.]+) h\)", lines).groups()
  worst = re.search(r"its variance is ([\d.]+)x the fixed design's", lines).group(1)
  _says("docs/results.md", f"({len(split['pairs'])} pairs,", f"R = {split['r']:g}, every continuation's reward kept",
        f"is {design[0]} questions, nodes_per_rollout {design[1]}, r = {design[2]}",
        f"`hours for R=64's precision: {hours[0]}` ({hours[1]} of the fixed design's {hours[2]} h)",
        f"has {worst}x the fixed design's variance", source="docs/data/variance_split/v2_block1*")


def test_the_real_records_subsampling_is_its_json():
  """docs/results.md's real-records check of the alignment ratio: the shifts, errors and shares of its JSON."""
  d = json.loads((DATA / "crossfit" / "v2_block1_subsampled.json").read_text())
  ratio, cosine = d["alignment_ratio"], d["alignment"]
  f4 = lambda x: f"{x:.4f}"
  _says("docs/results.md", f"--draws={d['draws']}", f"{d['configs']}\nconfigurations".replace("\n", " "),
        f"is {f4(ratio['max_mean_shift']['2'])} at r = 2 and {f4(ratio['max_mean_shift']['4'])} at r = 4",
        f"<= {f4(ratio['shift_se']['2'])} and {f4(ratio['shift_se']['4'])}",
        f"paired difference {f4(ratio['max_diff_shift']['2'])} and {f4(ratio['max_diff_shift']['4'])}",
        f"the per-node cosine's is {f4(cosine['max_mean_shift']['2'])} and {f4(cosine['max_mean_shift']['4'])}",
        f"({f4(cosine['max_diff_shift']['2'])} and {f4(cosine['max_diff_shift']['4'])} for a paired difference)",
        f"unchanged in {ratio['same_could_be_best']['2']:.2f} of the draws at r = 2 and at r = 4",
        f"({cosine['same_could_be_best']['2']:.2f} and {cosine['same_could_be_best']['4']:.2f} with the cosine)",
        f"kept its place in {ratio['same_best']['2']:.2f} of draws (cosine: {cosine['same_best']['2']:.2f}, "
        f"{cosine['same_best']['4']:.2f})", source="docs/data/crossfit/v2_block1_subsampled.json")
  assert ratio["same_could_be_best"]["2"] == ratio["same_could_be_best"]["4"]
  assert ratio["max_mean_shift"]["2"] <= 2 * ratio["shift_se"]["2"] and ratio["max_mean_shift"]["4"] <= 2 * ratio["shift_se"]["4"]


def test_stage1_outcomes_table_is_runs_csv_and_stage1_csv():
  """docs/data/validation_v2/stage1_expectations.md's table of what happened: each run's row from runs.csv and
  stage1.csv."""
  runs = pd.read_csv(DATA / "validation_v2" / "runs.csv").set_index("configuration")
  stage1 = pd.read_csv(DATA / "validation_v2" / "stage1.csv").set_index("configuration")
  path = "docs/data/validation_v2/stage1_expectations.md"
  names = [n for n in stage1.index if n in runs.index]
  assert len(names) == 5 and "s1_solution_moving_lr3e-5" in names, names
  for name in names:
    r, s = runs.loc[name], stage1.loc[name]
    row = _row(path, f"| {name} |")
    assert row == (f"| {name} | {_ci(r['diff'], r.lo, r.hi)} | {r.last_loss:.3f} | "
                   f"{_f(s.minus_v1, '+.3f')} [{s.minus_v1_lo:.3f}, {s.minus_v1_hi:.3f}] |"), row


def test_the_four_block_design_and_subsampling_are_their_files():
  """docs/results.md's four-block paragraphs: the dry run's two hours lines, the binding pair, and the alignment
  ratio's subsampled shifts on 80 questions."""
  lines = (DATA / "variance_split" / "v2_blocks1234_dry_run.txt").read_text()
  every = re.search(r"hours for R=64's precision: ([\d.]+) \(", lines).group(1)
  floor = re.search(r"floor of ([\d.]+) .*?, (\d+) of (\d+) pairs: ([\d.]+) \(([\d.]+) of the fixed design's [\d.]+ h; "
                    r"(\d+) questions, nodes_per_rollout (\d+), r = (\d+)\); the pairs that set the every-pair hours "
                    r"\((\S+ - \S+), .*?SE <= ([\d.]+),", lines).groups()
  worst = re.search(r"its variance is ([\d.]+)x the fixed design's", lines).group(1)
  _says("docs/results.md", f"`hours for R=64's precision: {every}` (1 of the fixed design's)",
        f"One pair sets it, {floor[8]}", f"standard error is <= {floor[9]} in the ratio's units",
        f"min_effect / 4 = {floor[0]} ({floor[1]} of {floor[2]} pairs; the dry run's next line): {floor[3]} h, "
        f"{floor[4]} of the fixed design's ({floor[5]} questions, nodes_per_rollout {floor[6]}, r = {floor[7]};",
        f"its variance is {worst}x the fixed design's on its worst pair",
        source="docs/data/variance_split/v2_blocks1234_dry_run.txt")
  crit = pd.read_csv(DATA / "variance_split" / "v2_blocks1234_criteria.csv").set_index("criterion")
  pct = lambda c, k, f: f"{crit.loc[c, 'boot_fraction_linear_' + k]:{f}}"
  _says("docs/results.md", f"median {pct('every pair', 'median', '.2f')}, 5th-95th percentiles "
        f"{pct('every pair', 'p05', '.2f')}-{crit.loc['every pair', 'boot_fraction_linear_p95']:.1f})",
        f"by the linear cost {crit.loc['pairs above the floor', 'fraction_linear']:.3f}, over the resamples median "
        f"{pct('pairs above the floor', 'median', '.3f')}, 5th-95th percentiles "
        f"{pct('pairs above the floor', 'p05', '.2f')}-{pct('pairs above the floor', 'p95', '.2f')})",
        source="docs/data/variance_split/v2_blocks1234_criteria.csv")
  d = json.loads((DATA / "crossfit" / "v2_blocks1234_subsampled.json").read_text())
  ratio, cosine = d["alignment_ratio"], d["alignment"]
  f4 = lambda x: f"{x:.4f}"
  _says("docs/results.md", f"is {f4(ratio['max_mean_shift']['2'])} at r = 2 and "
        f"{f4(ratio['max_mean_shift']['4'])} at r = 4 (Monte Carlo standard errors "
        f"{f4(ratio['max_mean_shift_se']['2'])} and {f4(ratio['max_mean_shift_se']['4'])}: within 2), of a paired "
        f"difference {f4(ratio['max_diff_shift']['2'])} and {f4(ratio['max_diff_shift']['4'])} (standard errors "
        f"{f4(ratio['max_diff_shift_se']['2'])} and {f4(ratio['max_diff_shift_se']['4'])}); the largest shift in its "
        f"own standard errors over the 351 pairs is {ratio['max_diff_shift_z']['2']:.1f} at r = 2 and "
        f"{ratio['max_diff_shift_z']['4']:.1f} at r = 4",
        f"cosine's shifts are {cosine['max_mean_shift']['2']:.3f} and {cosine['max_mean_shift']['4']:.3f} for a mean",
        f"unchanged in {ratio['same_could_be_best']['2']:.2f} of the draws at r = 2 and 4 with the ratio "
        f"({cosine['same_could_be_best']['2']:.2f} and {cosine['same_could_be_best']['4']:.2f} with the cosine)",
        f"it holds {len(ratio['could_be_best_at_R'])} of the {d['configs']} configurations",
        source="docs/data/crossfit/v2_blocks1234_subsampled.json")
  assert all(ratio["max_mean_shift"][r] <= 2 * ratio["max_mean_shift_se"][r] for r in ("2", "4"))   # "within 2"


def test_validation_v2_section_of_results_is_its_files():
  """docs/results.md's validation v2 section: stage 1's table (runs.csv, stage1.csv), the split-half reliabilities
  (stage2_reliability.csv), the primary's within-view contrasts and between-view spreads (stage2_contrasts.csv,
  stage2.csv) and the study's verdicts named before training (study_verdict_<stratum>.csv and _line.txt)."""
  v2 = DATA / "validation_v2"
  runs = pd.read_csv(v2 / "runs.csv").set_index("configuration")
  stage1 = pd.read_csv(v2 / "stage1.csv").set_index("configuration")
  path = "docs/results.md"
  for context in ("solution", "summary", "answer", "misleading"):
    r, s = runs.loc[f"s1_{context}_frozen"], stage1.loc[f"s1_{context}_frozen"]
    _has_line(path, f"| {r.spec}{' (a wrong reference)' if context == 'misleading' else ''} | "
                    f"{_ci(r['diff'], r.lo, r.hi)} | {r.last_loss:.3f} | {_ci(s.minus_v1, s.minus_v1_lo, s.minus_v1_hi)} |")
  frozen = runs.loc[[f"s1_{c}_frozen" for c in ("solution", "summary", "answer", "misleading")]]
  v1 = pd.read_csv(DATA / "validation" / "runs.csv").set_index("configuration").loc[
      ["solution", "summary", "answer", "misleading"], "last_loss"]
  _says(path, f"the losses stayed at {frozen.last_loss.min():.2f}-{frozen.last_loss.max():.2f} (v1's paired runs: "
              f"{v1.min():.0e} to {v1.max():.0e})", source="runs.csv of v2 and of v1")
  reliability = pd.read_csv(v2 / "stage2_reliability.csv")
  shape = reliability.groupby("stratum")[["configurations", "questions"]].max()
  blocks = [len(pd.read_csv(f)) for f in sorted(v2.glob("study_questions_*.csv"))]
  assert len(blocks) == 4 and set(blocks) == {20} and shape.questions.tolist() == [80, 80], (blocks, shape)
  _says(path, "four blocks of 20 questions", "split-half Spearman over random halves of the 80 questions (external, "
              f"{shape.configurations['external']} configurations / self, {shape.configurations['self']};",
        source="stage2_reliability.csv, study_questions_<b>.csv")
  rel = reliability.set_index(["stratum", "predictor"])["split_half_rho"]
  for label, predictor in (("alignment as training weighs the nodes (primary)", "alignment_trained"),
                           ("alignment, all nodes", "alignment_all"), ("alignment, correct nodes", "alignment_correct"),
                           ("alignment, incorrect nodes (the default verdict's)", "alignment_incorrect"),
                           ("teacher advantage", "teacher_advantage"), (r"-KL(q\|\|p) per token", "minus_kl_qp"),
                           ("-JS per token", "minus_js")):
    _has_line(path, f"| {label} | {rel['external', predictor]:.2f} | {rel['self', predictor]:.2f} |")
  contrasts = pd.read_csv(v2 / "stage2_contrasts.csv").query("predictor == 'alignment_trained'")
  values = pd.read_csv(v2 / "stage2.csv").query("predictor == 'alignment_trained' and divergence == 'rkl'")
  spread = values.groupby("stratum")["value"].agg(lambda v: v.max() - v.min())
  excludes = int(((contrasts.lo > 0) | (contrasts.hi < 0)).sum())
  honest = values[(values.stratum == "self") & ~values.view.isin(["self_misleading", "self_contrastive"])]["value"]
  _says(path, f"{excludes} of the {len(contrasts)} within-view pairs have a 95% interval (resampling questions) that "
              f"excludes 0, the largest difference {contrasts['diff'].abs().max():.3f}, against spreads of "
              f"{spread['external']:.2f} and {spread['self']:.2f} between the views' reverse-KL values",
        f"the three other views' reverse-KL values lie within {honest.max() - honest.min():.3f} of one another",
        source="stage2_contrasts.csv, stage2.csv")
  from benchmarks import validate_v2  # pylint: disable=g-import-not-at-top  (the planned runs)
  kinds = [("replicate" if seed == 1 else c.split("_")[0]) for c, seed in validate_v2.STAGE3]
  _says(path, f"({len(kinds)} runs: {kinds.count('ext')} external, {kinds.count('self')} self, "
              f"{kinds.count('replicate')} seed replicates;", source="benchmarks/validate_v2.py STAGE3")
  said = []
  for stratum in ("external", "self"):
    verdict = pd.read_csv(v2 / f"study_verdict_{stratum}.csv")
    detectable = re.search(r"detectable with 80% expected power at this budget: ([\d.]+)",
                           (v2 / f"study_verdict_{stratum}_line.txt").read_text()).group(1)
    said.append((int(verdict.could_be_best.sum()), len(verdict), f"{float(detectable):.3f}"))
  (a, n, d), (b, m, e) = said
  _says(path, f"(external: {a} of {n} could be best, detectable difference {d}; self: {b} of {m}, {e})",
        source="study_verdict_<stratum>.csv and _line.txt")


def test_validation_v2_stage3_figures_are_its_tables():
  """docs/results.md's stage-3 paragraph and README's v2 sentence: the primary test (stage3.csv's primary row: the
  statistic, its interval, its permutation p, each stratum's rho), the secondary predictors quoted, the regret of
  each rule named before training (stage3_regret.csv), the training noise (stage3_noise.csv), the expectations'
  counts and the exploratory rho (stage3_gains.csv, scipy), and the training's wall (runs.csv)."""
  v2 = DATA / "validation_v2"
  tests = pd.read_csv(v2 / "stage3.csv").set_index("predictor")
  p = tests[tests.primary].iloc[0]
  primary = (f"mean within-stratum Spearman {_ci(p.statistic, p.lo, p.hi, '+.2f')}, one-sided permutation p "
             f"{p.p_value:.2g}")
  _says("docs/results.md", primary, f"(external {p.rho_external:+.2f}, self {p.rho_self:+.2f}; "
        f"{int(p.configurations)} configurations;", source="stage3.csv")
  for name in ("alignment_incorrect", "alignment_correct", "minus_kl_qp", "minus_js", "minus_kl_pq", "topk_overlap"):
    _says("docs/results.md", f"{name} {tests.at[name, 'statistic']:+.2f} (p {tests.at[name, 'p_value']:.2g})",
          source="stage3.csv")
  qp, js = tests.loc["minus_kl_qp"], tests.loc["minus_js"]
  assert f"{qp.minus_primary:+.2f}" == f"{js.minus_primary:+.2f}"
  proxies = ("minus_kl_qp", "minus_kl_pq", "minus_js", "topk_overlap")      # item 6, rule 1: none above the primary
  assert not (tests.loc[list(proxies), "minus_primary_lo"] > 0).any()
  _says("docs/results.md", f"(minus the primary {qp.minus_primary:+.2f} [{qp.minus_primary_lo:+.2f}, "
        f"{qp.minus_primary_hi:+.2f}] and [{js.minus_primary_lo:+.2f}, {js.minus_primary_hi:+.2f}]",
        source="stage3.csv")
  regret = pd.read_csv(v2 / "stage3_regret.csv")
  for r in regret.itertuples():
    _says("docs/results.md", f"{r.named} ({r.gain:+.3f}; regret {r.regret:.3f})", source="stage3_regret.csv")
  ext = regret[regret.stratum == "external"].set_index("rule").regret
  no_study, study = ext.filter(like="no study").iloc[0], ext["the study's verdict"]
  _says("README.md", primary, f"fell {no_study:.3f} short of the best external configuration, the study's pick "
        f"{study:.3f}", source="stage3.csv, stage3_regret.csv")
  runs = pd.read_csv(v2 / "runs.csv")
  stage3 = runs[runs.stage == 3]                                 # every stage-3 run, replicates included
  ext, own = stage3[stage3.stratum == "external"], stage3[stage3.stratum == "self"]
  controls = own[own.configuration.str.contains("misleading|contrastive")]
  assert (ext["diff"] > 0).all() and (own.teacher_weights == "initial").all() and (controls.hi < 0).all()
  _says("README.md", f"all {len(ext)} external runs gained ({(ext.lo > 0).sum()} by their 95% intervals)",
        f"by theirs, {(own.hi < 0).sum()} of {len(own)} frozen self runs lost ({len(controls)} of them the controls, "
        f"down to {own['diff'].min():+.3f}) and {(own.lo > 0).sum()} gained", source="runs.csv")
  noise = pd.read_csv(v2 / "stage3_noise.csv").set_index("stratum")
  _says("docs/results.md", f"SD of {noise.at['external', 'between_sd']:.3f} against one run's training SD of "
        f"{noise.at['external', 'training_sd']:.3f}", f"(self: {noise.at['self', 'between_sd']:.3f} against "
        f"{noise.at['self', 'training_sd']:.3f})", source="stage3_noise.csv")
  from benchmarks import v2_results  # pylint: disable=g-import-not-at-top  (hypothesis.md's "within noise")
  gains = pd.read_csv(v2 / "stage3_gains.csv")
  e, s = gains[gains.stratum == "external"], gains[gains.stratum == "self"]
  honest = s[~s.configuration.str.contains("misleading|contrastive")]
  rho, p_honest = scipy.stats.spearmanr(honest.alignment_trained, honest.gain)
  pooled = scipy.stats.spearmanr(gains.alignment_trained, gains.gain)[0]
  agree = pd.read_csv(v2 / "stage3_pairs_summary.csv").set_index("predictor").loc[p.name]
  _says("docs/results.md", f"all {len(e)} configurations gained ({int((e.lo > 0).sum())} with an interval above 0)",
        f"{int((s.gain.abs() < v2_results.NOISE).sum())} of the {len(s)} self gains sit within noise",
        f"the rho is {rho:+.2f} (p {p_honest:.2f}, {len(honest)} configurations)",
        f"in {int(agree.agree)} of {int(agree.pairs)} pairs", f"(not tested) the rho is {pooled:+.2f}",
        source="stage3_gains.csv, stage3_pairs_summary.csv")
  assert (e.gain > 0).all() and (e.lowest_run_gain > 0).all()
  first = stage3[stage3.train_seed == -1]
  assert len(first) == int(p.configurations)
  _says("docs/results.md", f"took at least {first.wall_s.sum():.0f} s ({first.wall_s.sum() / 3600:.1f} h;",
        source="runs.csv")
