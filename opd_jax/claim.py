"""A config's identity: the hash that ties a workdir (and every record part) to the config that wrote it, and the
fields in which two configs differ. Fields added after studies had run hash as before at their old value
(`ADDED_FIELDS`), so an older study resumes. Imports nothing of opd_jax (records.py reads it)."""
from __future__ import annotations

import hashlib
import json

# Config fields that may change between a run and its resume (they do not change any record).
VOLATILE_FIELDS = ("logging",)

MISSING = object()   # a field one config dict has and the other lacks (`config_difference`)


# Config fields added after studies had run, with the value that does what a config without them did: at that
# value the field is left out of the hash and the comparison, so a run started before it resumes.
ADDED_FIELDS = {"report.estimand": "alignment", "budget.futility": 0.0, "train.teacher_weights": "current",
                "task.exclude": "", "train.seed": -1, "train.eval_at": [], "budget.pilot": "",
                "budget.precision_of": [], "budget.node_group": "balanced"}   # JSON values: () reads []


def _without_added(config_dict: dict) -> dict:
  """A copy of config_dict without the ADDED_FIELDS that hold their old behaviour's value."""
  d = json.loads(json.dumps(config_dict, default=str))
  for field, value in ADDED_FIELDS.items():
    *groups, leaf = field.split(".")
    node = d
    for g in groups:
      node = node.get(g) if isinstance(node, dict) else None
    if isinstance(node, dict) and node.get(leaf, MISSING) == value:
      del node[leaf]
  return d


def config_hash(config_dict: dict) -> str:
  """sha256 of the resolved config without VOLATILE_FIELDS and ADDED_FIELDS at their old value (canonical JSON)."""
  d = {k: v for k, v in _without_added(config_dict).items() if k not in VOLATILE_FIELDS}
  return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()


def config_difference(old: dict, new: dict, ignore: tuple[str, ...] = ()) -> list[str]:
  """Dotted paths of the fields that differ between two config dicts, compared as JSON (a tuple equals its list),
  leaves first where both sides are groups; `ignore` drops fields (and the groups' fields under them), and
  ADDED_FIELDS at their old value are left out on both sides."""
  norm = lambda d: json.loads(json.dumps(_without_added(d), sort_keys=True, default=str))
  out = []

  def walk(a, b, prefix):
    if isinstance(a, dict) and isinstance(b, dict):
      for k in sorted(set(a) | set(b)):
        walk(a.get(k, MISSING), b.get(k, MISSING), f"{prefix}.{k}" if prefix else k)
    elif a != b and not any(prefix == f or prefix.startswith(f + ".") for f in ignore):
      out.append(prefix)
  walk(norm(old), norm(new), "")
  return out


def whose(old: dict, new: dict) -> str:
  """" ('<old name>'; this one is '<new name>')" when two config dicts' names differ, else "": what a refused
  workdir's error says first, before the fields that differ."""
  names = old.get("name"), new.get("name")
  return f" ({names[0]!r}; this one is {names[1]!r})" if names[0] != names[1] else ""
