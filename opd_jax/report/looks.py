"""The sequential study (issue 33, item 2): look at the verdict after blocks of questions, stop once it is decided.

`budget.looks = (n_1, ..., n_K)`: the study looks when it has selected n_k questions (ascending); the cap
`budget.questions` is always the last look (appended when missing). At look k the verdict is
`decision.decide(..., design=design(config), look=k)` on the records of the first n_k selected questions (pool
order, so a look sees the same questions in a resumed run as in an uninterrupted one); the study stops when it is
decided (`verdict["decided"]`: one configuration could be best, or every one that could be is equivalent to it
within the margin `report.min_effect`), else goes on to the next look. The error rates hold over every look
taken (alpha spending: report/sequential.py). `budget.looks = ()` is the fixed design: one look, at the cap, and
records exactly as before.

Each look taken is kept in the progress file (`progress["looks"]`: look, questions, decided, decision, line),
written with the question that reached it; a run killed between a question's records and its look takes the look
on resume (the records are the same, so is the look). A decided or futile look marks the run done.

One process only: with several processes the questions of a look would depend on how fast each process runs;
`check` refuses it before any model loads.

The design lives with the report: the study's run loop (study/pipeline.py), the report command (report/cli.py)
and the cost model (cost/estimate.py) all read it, and it imports nothing of the study.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import pathlib

from opd_jax import claim
from opd_jax import records
from opd_jax import terminal
from opd_jax.estimators import variance
from opd_jax.report import common
from opd_jax.report import decision
from opd_jax.report import sequential


MIN_LOOK = 2              # below the power rule's 10 questions a look never decides (it is underpowered)


def schedule(config) -> tuple[int, ...]:
  """The question counts at which the study looks, ascending, the cap `budget.questions` last ((cap,) for the
  fixed design)."""
  cap = int(config.budget.questions)
  looks = sorted({int(n) for n in tuple(config.budget.get("looks", ()) or ()) if int(n) < cap})
  return tuple(looks) + (cap,)


# Mean questions at stopping over the cap, measured (benchmarks/verdict_calibration.py --cells=sequential --sims=500,
# looks 10/20/40/80, two configurations; uniform / geometric nodes per question): a difference of 0.5 paired-node
# sd stops at 0.51 / 0.65 of the cap, one of 0.3 at 0.78 / 0.86, none at 0.95 / 0.99.
MEASURED_STOP = {0.5: (0.51, 0.65), 0.3: (0.78, 0.86), 0.0: (0.95, 0.99)}


# With futility (budget.futility), where the cap cannot decide (six close configurations), measured the same way
# (--seq_cells=6 --futility=<f>; docs/results.md, "Futility"): the mean stop over the cap, geometric / uniform nodes,
# with the predictive probability (sequential.p_resolved; docs/data/futility/predictive_f0.1.jsonl).
MEASURED_FUTILE = {0.1: (0.57, 0.85)}


def futility_text(config) -> str:
  """The plan's clause on the futility stop ("" without one; `MEASURED_FUTILE` where that threshold was measured)."""
  f = design(config).futility
  if not f:
    return ""
  if f in MEASURED_FUTILE:
    lo, hi = MEASURED_FUTILE[f]
    return (f"; futility {f:g} also stops it once unlikely to decide by the cap: {lo:.2f}-{hi:.2f} of the cap where "
            "the cap cannot decide (calibration: six close configurations)")
  return (f"; futility {f:g} also stops it once unlikely to decide by the cap (this threshold is not calibrated: "
          "benchmarks/verdict_calibration.py --futility)")


def expected_text(config) -> str:
  """The plan's line on the sequential design's questions (`MEASURED_STOP`, `MEASURED_FUTILE`, stated as measured)."""
  sched = schedule(config)
  cap, lo = sched[-1], MEASURED_STOP[0.5][0]
  return (f"sequential: looks at {', '.join(map(str, sched[:-1]))} questions and stops once decided (cap {cap}): "
          f">= {sched[0]} questions; in the verdict's calibration (looks 10/20/40/80) the mean stop was "
          f"{lo:.2f}-{MEASURED_STOP[0.5][1]:.2f} of the cap for a large difference, "
          f"{MEASURED_STOP[0.0][0]:.2f}-{MEASURED_STOP[0.0][1]:.2f} for none (~{math.ceil(lo * cap)}-{cap} here)"
          + futility_text(config))


def is_sequential(config) -> bool:
  return len(schedule(config)) > 1


def design(config) -> sequential.Design:
  """The sequential design of a study config (`sequential.Design`): its looks, alpha = 5%, the equivalence
  margin `report.min_effect` (`sequential.MARGIN` when 0) and the futility threshold `budget.futility` (0: none)."""
  return sequential.Design(looks=schedule(config), margin=float(config.report.min_effect) or sequential.MARGIN,
                           futility=float(config.budget.get("futility", 0.0)))


def check(config, process_count: int) -> None:
  """Refuses a sequential study across processes (ValueError with the fix), before any model loads."""
  if is_sequential(config) and process_count > 1:
    raise ValueError(terminal.field_error(
        "config.budget.looks", f"needs one process, got {process_count} (a look's questions would depend on the "
        "processes' speed)", tuple(config.budget.looks), fix="set --config.budget.looks='()' to run the fixed "
        "design across processes"))


def example_looks(cap: int) -> str:
  """A valid budget.looks for a cap of `cap` questions, for error fixes: looks at a quarter and a half of the cap
  where both are >= MIN_LOOK, else at half, else at the cap itself (the cap is the last look anyway)."""
  cap = int(cap)
  if cap // 4 >= MIN_LOOK:
    return f"({cap // 4}, {cap // 2})"
  return f"({max(cap // 2, min(cap, MIN_LOOK))},)"


def validate(config) -> None:
  """budget.looks: question counts >= MIN_LOOK, strictly increasing, each <= budget.questions; budget.futility in
  [0, 1) (ValueError in `terminal.field_error`'s format)."""
  futility = config.budget.get("futility", 0.0)
  if isinstance(futility, bool) or not isinstance(futility, (int, float)) or not 0.0 <= futility < 1.0:
    raise ValueError(terminal.field_error(
        "config.budget.futility", "must be a probability in [0, 1)", futility,
        fix="e.g. --config.budget.futility=0.05 (stop a sequential study that is unlikely to decide by its cap), "
        "or 0 for none"))
  if futility > 0 and not tuple(config.budget.get("looks", ()) or ()):
    raise ValueError(terminal.field_error(
        "config.budget.futility", "needs budget.looks (a look before the cap to stop at)", futility,
        fix=f"add e.g. --config.budget.looks='{example_looks(config.budget.questions)}'" + (
            "" if config.get("report", {}).get("min_effect", 0.0) > 0 else
            f" --config.report.min_effect={sequential.MARGIN}") + ", or set --config.budget.futility=0"))
  looks = config.budget.get("looks", ())
  fix = (f"e.g. --config.budget.looks='{example_looks(config.budget.questions)}' (counts up to the cap, "
         f"budget.questions = {config.budget.questions}, the last look; raise the cap for later looks), or () for "
         "the fixed design")
  if not isinstance(looks, (tuple, list)) or not all(isinstance(n, int) and not isinstance(n, bool) for n in looks):
    raise ValueError(terminal.field_error("config.budget.looks", "must be a tuple of question counts", looks, fix=fix))
  if list(looks) != sorted(set(looks)) or any(n < MIN_LOOK or n > config.budget.questions for n in looks):
    raise ValueError(terminal.field_error(
        "config.budget.looks", f"must be strictly increasing counts in [{MIN_LOOK}, budget.questions = "
        f"{config.budget.questions}]", tuple(looks), fix=fix))
  validate_pilot(config)


def validate_pilot(config) -> None:
  """budget.pilot: "" or a readable variance split (`variance.read_pilot`); budget.precision_of: () or three
  integers >= 1 (ValueError in `terminal.field_error`'s format, or naming the file)."""
  pilot = config.budget.get("pilot", "")
  if not isinstance(pilot, str):
    raise ValueError(terminal.field_error("config.budget.pilot", "must be a path (a string) or ''", pilot))
  if pilot:
    try:
      variance.read_pilot(pilot, "config.budget.pilot")
    except ValueError as e:
      raise ValueError(f"{e}; or --config.budget.pilot='' (no pilot)") from None
  ref = config.budget.get("precision_of", ()) or ()
  if not isinstance(ref, (tuple, list)) or (ref and (len(ref) != 3 or any(
      isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in ref))):
    raise ValueError(terminal.field_error(
        "config.budget.precision_of", "must be () or (questions, nodes_per_rollout, continuations_per_candidate), "
        "integers >= 1", ref, fix="e.g. --config.budget.precision_of='(100, 16, 64)'"))


def design_record(cfg: dict) -> dict:
  """manifest.json "design": what a study's numbers rest on, from its config dict (issue 48, item 4): the node
  group, estimand and equivalence margin of the verdict, questions (the cap), node rollouts, nodes per rollout, r
  (continuations per candidate, uniform) or the allocation's mean, the looks and futility stop, the fixed design
  whose precision it was chosen to reach (`precision_of`, None if none) and the pilot it was chosen from (None, or
  its path, sha256 and the split itself: estimand, target, R, source and per pair the variance components).
  A config written before these fields reads as their old values (claim.ADDED_FIELDS)."""
  b, r = cfg.get("budget", {}), cfg.get("report", {})
  out = {"estimand": r.get("estimand", "alignment"), "target": r.get("target", "incorrect"),
         "min_effect": r.get("min_effect", 0.0), "questions": b.get("questions"),
         "node_rollouts_per_question": b.get("node_rollouts_per_question"),
         "nodes_per_rollout": b.get("nodes_per_rollout"), "r": b.get("continuations_per_candidate"),
         "allocation": "adaptive" if b.get("adaptive") else b.get("allocation", "uniform"),
         "looks": list(b.get("looks", ()) or ()), "futility": b.get("futility", 0.0),
         "precision_of": list(b.get("precision_of", ()) or ()) or None, "pilot": None}
  if out["allocation"] != "uniform":
    out["continuations_mean"] = b.get("continuations_mean")
  if b.get("node_group", "balanced") != "balanced":      # node rollouts from the verdict's group only (design.py)
    out["node_group"] = b["node_group"]
  if b.get("pilot"):
    path = variance.pilot_path(b["pilot"])
    text = path.read_bytes()
    out["pilot"] = {"path": b["pilot"], "sha256": hashlib.sha256(text).hexdigest(), "split": json.loads(text)}
  return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Looks:
  """The sequential design as the run loop and the report read it, resolved once from the config (`resolve`).

  Attributes:
    design: `design(config)`; design.looks is `schedule(config)` (the cap last; one look: the fixed design).
    target: the verdict's group of nodes (config.report.target: "incorrect", "correct", "all" or "trained").
    estimand: what the verdict compares per node (config.report.estimand, default "alignment").
  """
  design: sequential.Design
  target: str = "incorrect"
  estimand: str = "alignment"

  @property
  def sequential(self) -> bool:
    return self.design.n_looks > 1


def resolve(config) -> Looks:
  """The `Looks` of a checked config."""
  return Looks(design=design(config), target=config.report.target,
               estimand=config.report.get("estimand", "alignment"))


def verdict(nodes, seq: Looks, look: int, final: bool = False, **kwargs) -> dict:
  """decision.decide at `look` (1-based) of the design on `nodes` (its target group, estimand and margin)."""
  d = seq.design
  return decision.decide(nodes, target=seq.target, level=1.0 - d.alpha, min_effect=d.margin, design=d, look=look,
                         final=final, estimand=seq.estimand, **kwargs)


def take(workdir: pathlib.Path, seq: Looks, selected: list[str], look: int) -> dict:
  """Look `look` (1-based): the verdict on the first seq.design.looks[look - 1] selected questions; returns the
  progress entry {look, questions, decided, decision, line}."""
  n = seq.design.looks[look - 1]
  nodes = records.read_table(workdir, "nodes")
  nodes = nodes[nodes["question_id"].isin(set(selected[:n]))].reset_index(drop=True)
  rates = None
  if seq.target == common.TRAINED:     # the report's reader of the rollouts' two columns, imported only here
    from opd_jax.report import build  # pylint: disable=g-import-not-at-top  (it loads matplotlib)
    rates = build.success_rates(workdir, seq.target)
  v = verdict(nodes, seq, look, n_boot=200,          # the bootstrap intervals are descriptive: few suffice
              question_order=selected,               # each pair's level from its own history of looks
              success_rates=rates)
  note_look(workdir, selected, n, seq.design.looks)
  return {"look": look, "questions": n, "decided": bool(v["decided"]), "decision": v["decision"], "line": v["line"]}


def pending(seq: Looks, selected: list[str], taken: list[dict]) -> list[int]:
  """Looks (1-based) that `selected` has reached and that were not taken yet, in order; the cap's excluded (the
  last look is the report itself)."""
  done = {t["look"] for t in taken}
  return [k + 1 for k, n in enumerate(seq.design.looks[:-1]) if n <= len(selected) and k + 1 not in done]


def stops(entry: dict) -> bool:
  """Whether a look's progress entry stops the study: decided, or futile (`sequential.read`)."""
  return bool(entry["decided"]) or entry.get("decision") == "futile"


def stopped(taken: list[dict]) -> dict | None:
  """The look that stopped the study (decided or futile), or None."""
  return next((t for t in taken if stops(t)), None)


def report_look(seq: Looks, progress: dict) -> dict:
  """The design arguments of a finished run's report (`report.write_summary`): {design, look, final,
  question_order (the selected questions in order: each pair's history of looks)}. The fixed
  design is one look (its verdict reads equivalence within the margin too, at the fixed design's level); a
  sequential one's: the look that stopped it; the last look when it reached the cap; else (the pool ran out
  first) the look after the ones taken, final, spending what is left."""
  d, taken = seq.design, list(progress.get("looks") or [])
  order = list(progress.get("selected") or []) or None
  stop = stopped(taken)
  if stop is not None:
    return {"design": d, "look": stop["look"], "final": False, "question_order": order}
  K = d.n_looks
  if K == 1 or len(progress.get("selected") or []) >= d.looks[-1]:
    return {"design": d, "look": K, "final": False, "question_order": order}
  return {"design": d, "look": min(len(taken) + 1, K), "final": True, "question_order": order}


# --- Looks the design did not plan (issue 49, item 4) --------------------------------------------------------
# Every verdict a study reads (each look, and its report) is noted in a ledger beside the model cache, one JSON line
# per look: the study's question key (the config without its budget's cap, looks and futility, report and logging:
# studies with the same key select the same questions in the same order), its workdir, the questions it had seen
# and its schedule. A study whose questions overlap an earlier study's of the same key but another schedule (a rerun
# with a larger cap, the advice a verdict used to give) would look at those questions again: its verdict is labelled
# "not a decision". A rerun of the same config is a replication (the same records, the same verdict), not a look.
LEDGER_ENV = "OPD_JAX_LOOKS_LEDGER"     # the ledger's path; "off": none (the tests' default); unset: the cache's
UNPLANNED_FIELDS = ("budget.questions", "budget.looks", "budget.futility", "report", "logging")


def ledger_path() -> pathlib.Path | None:
  import os  # pylint: disable=g-import-not-at-top
  from opd_jax.models import cache  # pylint: disable=g-import-not-at-top
  value = os.environ.get(LEDGER_ENV, "")
  if value == "off":
    return None
  return pathlib.Path(value) if value else cache.cache_root() / "looks.jsonl"


def question_key(config_dict: dict) -> str:
  """What decides a study's questions and their order: its config without UNPLANNED_FIELDS (config_hash)."""
  d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config_dict.items()}
  for field in UNPLANNED_FIELDS:
    group, _, leaf = field.partition(".")
    if leaf and isinstance(d.get(group), dict):
      d[group].pop(leaf, None)
    elif not leaf:
      d.pop(group, None)
  return claim.config_hash(d)


def _key(workdir: pathlib.Path) -> str | None:
  """The question key of the workdir's config.json, or None where it cannot be read."""
  import json  # pylint: disable=g-import-not-at-top
  try:
    return question_key(json.loads((workdir / "config.json").read_text()))
  except (OSError, ValueError):
    return None


def _entries(workdir: pathlib.Path) -> tuple[str | None, list[dict]]:
  """(this workdir's question key, the ledger's entries of that key from other workdirs that still exist)."""
  import json  # pylint: disable=g-import-not-at-top
  path, key = ledger_path(), _key(workdir)
  if key is None:
    return None, []
  if path is None or not path.is_file():
    return key, []
  out = []
  for line in path.read_text().splitlines():
    try:
      e = json.loads(line)
    except ValueError:
      continue
    if e.get("key") == key and e.get("workdir") != str(workdir.resolve()) and pathlib.Path(e["workdir"]).exists():
      out.append(e)
  return key, out


def note_look(workdir, selected: list[str], n: int, schedule: tuple[int, ...]) -> None:
  """Append this look (the first n of `selected`) to the ledger; a ledger that cannot be written is skipped (it
  informs later studies, it is not this study's record)."""
  import json  # pylint: disable=g-import-not-at-top
  workdir = pathlib.Path(workdir)
  key, path = _key(workdir), ledger_path()
  if key is None or path is None:
    return
  entry = {"key": key, "workdir": str(workdir.resolve()), "ids": [str(q) for q in selected[:n]],
           "schedule": list(schedule)}
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
      f.write(json.dumps(entry) + "\n")
  except OSError:
    pass


def unplanned(workdir, selected: list[str], schedule: tuple[int, ...]) -> str | None:
  """Why this study's verdict is not a decision, or None: an earlier study of the same questions (same key, its
  questions a prefix of these or these of its) under another schedule already looked at them."""
  workdir = pathlib.Path(workdir)
  ids = [str(q) for q in selected]
  _, entries = _entries(workdir)
  for e in entries:
    seen = e.get("ids") or []
    n = min(len(seen), len(ids))
    if n and seen[:n] == ids[:n] and tuple(e.get("schedule") or ()) != tuple(schedule):
      return (f"{n} of these questions were already looked at by {e['workdir']} (looks at "
              f"{', '.join(map(str, e['schedule']))}): its error rates do not cover another look at them; "
              f"a new study on questions neither saw keeps them (--config.task.exclude=<workdir>/questions_seen.json)")
  return None
