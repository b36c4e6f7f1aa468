"""Bytes moved per call of a compiled XLA program, loop bodies x their trip counts, read off its optimised HLO.

  report = hlo_bytes.analyze(jax.jit(f).lower(*args).compile())
  report.bytes, report.loops, report.by_op, report.largest_copy_in_loop; print(report.summary())

`compiled.cost_analysis()["bytes accessed"]` counts a while loop's body and condition once; `analyze` walks the
post-optimisation HLO module (`compiled.as_text()`) and multiplies them by the loop's trip count. Per op it
follows the rules of XLA's `HloCostAnalysis`, so `Report.xla_bytes` (loops once) reproduces XLA:CPU's number:
  - an executed op counts its operands' bytes + its output's bytes, once per execution. Executed: the ops of the
    entry computation, of `call` targets, of while bodies and conditions (trip count x each; the condition's
    last, failing check is left out) and of a conditional's branch with the most bytes (XLA takes the max too).
  - 0 bytes: parameter, constant, get-tuple-element, tuple, bitcast, after-all, add-dependency, opt-barrier,
    domain; a while / conditional / call op counts its computations instead. (XLA counts a tuple op as its
    index table, 8 bytes per element: `xla_bytes` does too, `bytes` not.)
  - a fusion is one op; values inside it never count. Its output counts in full, except an output computed by
    a dynamic-update-slice (in place: XLA aliases it with the buffer operand), which counts the update's bytes.
    Each operand (fused parameter) counts its reads: per slice / dynamic-slice of it the slice's bytes, as the
    buffer of a dynamic-update-slice 0, per broadcast / reshape of it its full bytes, and its full bytes once
    for any other use. Constants of more than one element inside it count their bytes. One departure from
    XLA, in `bytes` only: per gather from it the gathered bytes (XLA: its full bytes, e.g. a whole embedding
    table per token lookup).
  - unfused: slice 2 x output; dynamic-slice 2 x output + its first start index; dynamic-update-slice (in
    place) 2 x update + its first start index; gather 2 x output + indices; scatter 3 x updates + indices.
So a dynamic-update-slice into a carried KV cache counts the written slice, not the cache. A tuple-shaped
operand or output of any other op counts the sum of its arrays (XLA: its 8-byte-per-element index table).

Copies: ops in loop bodies (any depth) that only move data, with an output of more than one element: copy,
transpose, reshape, slice, dynamic-slice, dynamic-update-slice, concatenate, pad, reverse, gather, convert,
bitcast-convert, and fusions of those (integer scalar index arithmetic aside). A cache-sized one in a decode
loop is traffic the loop should not have.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import re

DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
               "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}   # f8*, f4*, s4, u4, s2...: 1 byte
FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "add-dependency",
        "opt-barrier", "domain"}
MOVES = {"copy", "transpose", "bitcast", "reshape", "slice", "dynamic-slice", "dynamic-update-slice",
         "concatenate", "pad", "reverse", "gather", "convert", "bitcast-convert"}
_FLIP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}
_NAME = r"%([\w.\-]+)"

Loop = collections.namedtuple("Loop", "name trips bytes_per_iter body")
Copy = collections.namedtuple("Copy", "name kind shape bytes computation")
_Ins = collections.namedtuple("_Ins", "name shape op args literal attrs")
_Comp = collections.namedtuple("_Comp", "name ins root")


@dataclasses.dataclass(frozen=True)
class Report:
  """What one call of a compiled program moves.

  Attributes:
    bytes: bytes moved by one call, every loop body x its trip count (module docstring).
    xla_bytes: the same with every loop once and tuple ops as index tables: XLA:CPU's cost_analysis() number.
    loops: `Loop(name, trips, bytes_per_iter, body)` per while op executed, inner loops before their outer
      one; bytes_per_iter: body + condition, inner loops x their trip counts.
    copies: `Copy(name, kind, shape, bytes, computation)` per copy-like op in a loop body, largest first. kind:
      "copy", "transpose", "fusion(dynamic-slice)", ...; shape: the HLO output shape, layout included; bytes:
      written per execution (the update's for an in-place dynamic-update-slice); computation: where it is.
    by_op: bytes per opcode, largest first; a fusion as "fusion:<opcode of its root>" (bitcasts looked through).
  """
  bytes: float
  xla_bytes: float
  loops: tuple[Loop, ...]
  copies: tuple[Copy, ...]
  by_op: dict[str, float]

  @property
  def largest_copy_in_loop(self) -> int:
    """Bytes written by the largest copy-like op inside any loop body; 0 if none."""
    return max((c.bytes for c in self.copies), default=0)

  def summary(self, top: int = 8) -> str:
    """A few lines for a terminal: totals, loops, the `top` opcodes by bytes and the `top` largest copies."""
    lines = [f"bytes/call {self.bytes:,.0f}   (loops once, as XLA's cost_analysis: {self.xla_bytes:,.0f})"]
    lines += [f"  loop {l.name}: {l.trips} x {l.bytes_per_iter:,.0f} B/iter  (body {l.body})" for l in self.loops]
    lines += [f"  {k:<40} {v:>18,.0f}" for k, v in list(self.by_op.items())[:top]]
    lines += [f"  copy in loop: {c.kind} {c.shape} {c.bytes:,} B  ({c.name} in {c.computation})"
              for c in self.copies[:top]]
    return "\n".join(lines)


def _close(s: str, i: int) -> int:
  """Index of the parenthesis closing the one at s[i]."""
  depth = 0
  for j in range(i, len(s)):
    depth += {"(": 1, ")": -1}.get(s[j], 0)
    if depth == 0:
      return j
  raise ValueError(f"unbalanced parentheses in HLO line: {s[:200]}")


def _parse(text: str) -> tuple[dict[str, _Comp], str]:
  """{computation name: _Comp} and the entry computation's name, from an HLO module's text."""
  comps, entry, cur, root = {}, None, None, None
  for line in text.splitlines():
    if cur is None and (m := re.match(r"(ENTRY )?%([\w.\-]+) \(.*\{$", line)):
      name, cur, entry = m.group(2), {}, m.group(2) if m.group(1) else entry
    elif cur is not None and line.startswith("}"):
      comps[name], cur = _Comp(name, cur, root), None
    elif cur is not None and (m := re.match(r"\s*(ROOT )?%([\w.\-]+) = (.*)", line)):
      rest = m.group(3)
      j = _close(rest, 0) + 1 if rest.startswith("(") else rest.index(" ")       # a tuple shape or an array's
      shape, rest = rest[:j], rest[j:].lstrip()
      k = rest.index("(")
      e = _close(rest, k)
      cur[m.group(2)] = _Ins(m.group(2), shape, rest[:k], re.findall(_NAME, rest[k + 1:e]), rest[k + 1:e],
                             rest[e + 1:])
      root = m.group(2) if m.group(1) else root
  if entry is None:
    raise ValueError("no ENTRY computation in the HLO text")
  return comps, entry


def _arrays(shape: str) -> list[tuple[str, int]]:
  """(dtype, element count) of every array in an HLO shape string (a tuple's leaves)."""
  return [(dt, math.prod(int(d.lstrip("<=")) for d in dims.split(",") if d))
          for dt, dims in re.findall(r"([a-z][a-z0-9]*)\[([^\]]*)\]", shape)]


def _nbytes(shape: str) -> int:
  return sum(n * DTYPE_BYTES.get(dt, 1 if dt[:2] in ("f8", "f4", "s4", "u4", "s2", "u2") else 0)
             for dt, n in _arrays(shape))


def _elems(shape: str) -> int:
  return sum(n for _, n in _arrays(shape))


def _attr(ins: _Ins, key: str) -> str:
  return re.search(rf"\b{key}={_NAME}", ins.attrs).group(1)


class _Walk:
  """One walk over the call graph from the entry computation; collects loops and copies on the way."""

  def __init__(self, comps: dict[str, _Comp], trip_counts: dict[str, int], unknown_trips: int | None = None):
    self.comps, self.trip_counts, self.unknown_trips = comps, trip_counts, unknown_trips
    self.loops, self.copies, self.callers = [], [], {}

  def comp(self, name: str, in_loop: bool) -> tuple[float, float, collections.Counter]:
    """(bytes, xla_bytes, bytes by opcode) of one execution of computation `name`."""
    c = self.comps[name]
    total, xla, by_op = 0.0, 0.0, collections.Counter()
    for ins in c.ins.values():
      if ins.op == "while":
        n, body = self.trip_count(c, ins), _attr(ins, "body")
        (b1, x1, o1), (b2, x2, o2) = self.comp(body, True), self.comp(_attr(ins, "condition"), True)
        self.loops.append(Loop(ins.name, n, b1 + b2, body))
        b, x, o = n * (b1 + b2), x1 + x2, collections.Counter({k: n * v for k, v in (o1 + o2).items()})
      elif ins.op == "conditional":
        m = re.search(r"branch_computations=\{([^}]*)\}", ins.attrs)
        names = (re.findall(_NAME, m.group(1)) if m
                 else [_attr(ins, "true_computation"), _attr(ins, "false_computation")])
        branches = [self.comp(b, in_loop) for b in names]
        (b, _, o), x = max(branches, key=lambda r: r[0]), max(r[1] for r in branches)
      elif ins.op == "call":
        self.callers[_attr(ins, "to_apply")] = (c, ins)
        b, x, o = self.comp(_attr(ins, "to_apply"), in_loop)
      else:
        b, x = self.op_bytes(c, ins)
        x = 8 * len(ins.args) if ins.op == "tuple" else x
        key = ins.op if ins.op != "fusion" else "fusion:" + self.root_op(ins)
        o = collections.Counter({key: b} if b else {})
        if in_loop:
          self.check_copy(c, ins)
      total, xla, by_op = total + b, xla + x, by_op + o
    return total, xla, by_op

  def root_op(self, fusion: _Ins) -> str:
    """Opcode of a fusion's root, looking through bitcasts and reshapes."""
    f = self.comps[_attr(fusion, "calls")]
    root = f.ins[f.root]
    while root.op in ("bitcast", "reshape") and root.args[0] in f.ins:
      root = f.ins[root.args[0]]
    return root.op

  def out_bytes(self, c: _Comp, ins: _Ins) -> int:
    """Output bytes of an op; an in-place dynamic-update-slice (fused or not) writes only its update."""
    if ins.op == "fusion":
      f = self.comps[_attr(ins, "calls")]
      root = f.ins[f.root]
      return sum(self.out_bytes(f, f.ins[r]) for r in root.args) if root.op == "tuple" else self.out_bytes(f, root)
    return _nbytes(c.ins[ins.args[1]].shape) if ins.op == "dynamic-update-slice" else _nbytes(ins.shape)

  def op_bytes(self, c: _Comp, ins: _Ins) -> tuple[int, int]:
    """Bytes one execution of `ins` (not a while, conditional or call) moves: ours and XLA's (module docstring)."""
    op, a, size = ins.op, ins.args, lambda n: _nbytes(c.ins[n].shape)
    if op in FREE:
      return 0, 0
    out = self.out_bytes(c, ins)
    if op in ("slice", "dynamic-slice", "gather", "dynamic-update-slice"):
      b = 2 * out + (size(a[2] if op == "dynamic-update-slice" else a[1]) if op != "slice" else 0)
      return b, b
    if op == "scatter":
      b = 3 * sum(size(u) for u in a[len(a) // 2 + 1:]) + size(a[len(a) // 2])
      return b, b
    if op != "fusion":
      return out + sum(size(n) for n in a), out + sum(size(n) for n in a)
    f = self.comps[_attr(ins, "calls")]
    users = collections.defaultdict(list)
    for i in f.ins.values():
      for n in dict.fromkeys(i.args):
        users[n].append(i)
    reads = sum(_nbytes(i.shape) for i in f.ins.values() if i.op == "constant" and _elems(i.shape) > 1)
    gathered = 0                                                        # ours - XLA's, from fused gathers
    for p in (i for i in f.ins.values() if i.op == "parameter"):
      other, gather = False, []
      for u in users[p.name]:
        if u.op == "slice" or (u.op == "dynamic-slice" and u.args[0] == p.name):
          reads += _nbytes(u.shape)
        elif u.op in ("broadcast", "reshape"):
          reads += _nbytes(p.shape)
        elif u.op == "gather" and u.args[0] == p.name:
          gather.append(_nbytes(u.shape))
        elif not (u.op == "dynamic-update-slice" and u.args[0] == p.name):
          other = True
      reads += _nbytes(p.shape) if other or gather else 0
      gathered += sum(gather) - _nbytes(p.shape) if gather and not other else 0
    return out + reads + gathered, out + reads

  def check_copy(self, c: _Comp, ins: _Ins):
    """Records `ins` (in a loop body) in `copies` if it only moves data."""
    if _elems(ins.shape) <= 1 or (ins.op != "fusion" and ins.op not in MOVES - {"bitcast"}):
      return
    kind = ins.op
    if ins.op == "fusion":
      ops = {i.op for i in self.comps[_attr(ins, "calls")].ins.values() if i.op not in ("parameter", "constant")
             and not (_elems(i.shape) <= 1 and re.match(r"(pred|[su]\d+)\[", i.shape))}   # index arithmetic
      if not ops or not ops <= MOVES:
        return
      kind = f"fusion({','.join(sorted(ops - {'bitcast', 'reshape'} or ops))})"
    self.copies.append(Copy(ins.name, kind, ins.shape, self.out_bytes(c, ins), c.name))

  def trip_count(self, c: _Comp, ins: _Ins) -> int:
    if ins.name in self.trip_counts:
      return int(self.trip_counts[ins.name])
    if m := re.search(r'"known_trip_count":\{"n":"(\d+)"\}', ins.attrs):
      return int(m.group(1))
    if (n := self.infer_trips(c, ins)) is None and self.unknown_trips is not None:
      return self.unknown_trips
    if n is None:
      raise ValueError(f"while loop {ins.name} (body {_attr(ins, 'body')}): no known_trip_count and its condition "
                       f"is not `induction variable < constant`; pass trip_counts={{'{ins.name}': n}}")
    return n

  def scalar(self, c: _Comp, name: str, env: dict) -> tuple[int | None, int] | None:
    """Scalar `name` as (k, v): tuple element k of the computation's parameter + v; (None, v): the constant v."""
    i = c.ins[name]
    if i.op == "parameter":
      return env.get(name)
    if i.op == "constant":
      return (None, int(i.literal)) if re.fullmatch(r"-?\d+", i.literal) else None
    if i.op == "get-tuple-element" and c.ins[i.args[0]].op == "parameter":
      return int(re.search(r"index=(\d+)", i.attrs).group(1)), 0
    if i.op in ("copy", "convert", "bitcast", "reshape"):
      return self.scalar(c, i.args[0], env)
    if i.op == "fusion":
      f = self.comps[_attr(i, "calls")]
      return self.scalar(f, f.root, self.bind(c, i, f, env))
    if i.op == "add" and (x := self.scalar(c, i.args[0], env)) and (y := self.scalar(c, i.args[1], env)):
      return ((x[0] if x[0] is not None else y[0]), x[1] + y[1]) if None in (x[0], y[0]) else None
    return None

  def bind(self, c: _Comp, fusion: _Ins, f: _Comp, env: dict) -> dict:
    """{parameter of fused computation f: scalar value of the fusion's operand}."""
    return {p.name: self.scalar(c, fusion.args[int(p.literal)], env) for p in f.ins.values() if p.op == "parameter"}

  def infer_trips(self, c: _Comp, ins: _Ins) -> int | None:
    """Trip count of a `for i in range(start, bound, step)` while loop (fori_loop, scan), else None."""
    cond, body = self.comps[_attr(ins, "condition")], self.comps[_attr(ins, "body")]
    comp, root, env = cond, cond.ins[cond.root], {}
    if root.op == "fusion":
      f = self.comps[_attr(root, "calls")]
      comp, root, env = f, f.ins[f.root], self.bind(cond, root, f, {})
    if root.op != "compare" or not (d := re.search(r"direction=(\w+)", root.attrs)):
      return None
    d, (x, y) = d.group(1), (self.scalar(comp, n, env) for n in root.args)
    if x and x[0] is None:
      d, x, y = _FLIP.get(d, d), y, x
    init, nxt = c.ins[ins.args[0]], body.ins[body.root]
    while init.op == "parameter" and c.name in self.callers:            # the loop state passed in by a call
      c, call = self.callers[c.name]
      init = c.ins[call.args[int(init.literal)]]
    if not x or not y or x[0] is None or x[1] or y[0] is not None or init.op != "tuple" or nxt.op != "tuple":
      return None
    start, step = self.scalar(c, init.args[x[0]], {}), self.scalar(body, nxt.args[x[0]], {})
    if not start or start[0] is not None or not step or step[0] != x[0]:
      return None
    i0, s, bound = start[1], step[1], y[1] + {"LE": 1, "GE": -1}.get(d, 0)
    if d in ("LT", "LE") and s > 0:
      return max(0, -(-(bound - i0) // s))
    if d in ("GT", "GE") and s < 0:
      return max(0, -(-(i0 - bound) // -s))
    return None


def analyze(compiled, trip_counts: dict[str, int] | None = None, unknown_trips: int | None = None) -> Report:
  """Bytes moved by one call of a compiled program, every loop body x its trip count (rules: module docstring).

  Args:
    compiled: `jax.jit(f).lower(*args).compile()` (anything with `.as_text()`), or HLO module text.
    trip_counts: {while op name: trip count}, for loops with no `known_trip_count` in the HLO that are not
      `for i in range(start, bound, step)` loops (a `lax.while_loop` with a data-dependent exit: give the count
      to meter, e.g. the token cap); overrides the recorded count too.
    unknown_trips: the count of every other loop whose count is neither recorded nor inferable (None: raise).

  Returns:
    A `Report`; its bytes are per call of the program (per step when the program is one step).

  Raises:
    ValueError: a while loop's trip count is unknown (the message names the loop), or the text is no HLO module.
  """
  comps, entry = _parse(compiled if isinstance(compiled, str) else compiled.as_text())
  walk = _Walk(comps, dict(trip_counts or {}), unknown_trips)
  total, xla, by_op = walk.comp(entry, False)
  return Report(total, xla, tuple(walk.loops), tuple(sorted(walk.copies, key=lambda c: -c.bytes)),
                dict(by_op.most_common()))
