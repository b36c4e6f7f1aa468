"""The packages of opd_jax import one way (issue 49, item 9): no package imports one that imports it, and no cycle
runs through several. Every import counts, at module level and inside functions, read from each module's AST.

A package is a folder under opd_jax/ or a module at its top (records.py, flops.py, terminal.py, main.py). main.py is
the entry point (no package imports it); terminal.py, atomic.py and claim.py are leaves (they import no other package).
"""
import ast
import collections
import pathlib

import opd_jax

ROOT = pathlib.Path(opd_jax.__file__).parent
ENTRY = "main"
LEAVES = ("terminal", "atomic", "claim")


def _module(path: pathlib.Path, root: pathlib.Path) -> str:
  parts = path.relative_to(root.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: pathlib.Path, root: pathlib.Path) -> list[tuple[str, int]]:
  """(dotted name imported, line) of every import in `path`, module level or not; relative imports resolved."""
  name = _module(path, root)
  package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
  out = []
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      out += [(a.name, node.lineno) for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
      out += [(f"{base}.{a.name}", node.lineno) for a in node.names]   # `from p import m`: m may be a module
  return out


def package_graph(root: pathlib.Path) -> dict[tuple[str, str], list[str]]:
  """{(package, package it imports): ["<file>:<line> imports <name>", ...]} over every module under `root`."""
  def package(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if parts[0] == root.name and len(parts) > 1 else None

  edges = collections.defaultdict(list)
  for path in sorted(root.rglob("*.py")):
    source = package(_module(path, root))
    for name, line in imports(path, root):
      target = package(name)
      if source and target and source != target:
        edges[source, target].append(f"{path.relative_to(root.parent)}:{line} imports {name}")
  return dict(edges)


def _cycles(edges) -> list[list[str]]:
  """One cycle (a list of packages, the first repeated last) per strongly connected component of > 1 package."""
  graph = collections.defaultdict(set)
  for a, b in edges:
    graph[a].add(b)
  index, low, stack, on_stack, components = {}, {}, [], set(), []

  def visit(v):                                          # Tarjan's algorithm
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = set()
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.add(w)
        if w == v:
          break
      if len(component) > 1:
        components.append(component)

  for v in sorted(graph):
    if v not in index:
      visit(v)
  out = []
  for component in components:                 # the shortest way back to its first package (breadth first)
    start = min(component)
    parent, queue = {}, collections.deque([start])
    while start not in parent:
      v = queue.popleft()
      for w in sorted(graph[v] & component):
        if w not in parent:
          parent[w] = v
          queue.append(w)
    cycle = [start]
    while len(cycle) == 1 or cycle[-1] != start:
      cycle.append(parent[cycle[-1]])
    out.append(cycle[::-1])
  return out


def problems(edges, entry: str = ENTRY, leaves=LEAVES) -> list[str]:
  """What breaks the one-way graph, each line naming the modules and lines that do it: two packages importing each
  other, a cycle through several, the entry point imported, a leaf importing a package."""
  out = []
  for (a, b), where in sorted(edges.items()):
    if a < b and (b, a) in edges:
      out.append(f"{a} <-> {b}: " + "; ".join(where + edges[b, a]))
  for cycle in _cycles(edges):
    out.append("cycle " + " -> ".join(cycle) + ": "
               + "; ".join(edges[a, b][0] for a, b in zip(cycle, cycle[1:])))
  for (a, b), where in sorted(edges.items()):
    if b == entry:
      out.append(f"{a} imports the entry point {entry}: " + "; ".join(where))
    if a in leaves:
      out.append(f"the leaf {a} imports {b}: " + "; ".join(where))
  return out


def test_no_package_of_opd_jax_imports_one_that_imports_it():
  edges = package_graph(ROOT)
  packages = {p for edge in edges for p in edge}
  assert {"study", "report", "records", "teachers", "cost", "decode", "models", "main", "terminal", "atomic",
          "claim"} <= packages
  found = problems(edges)
  assert not found, "imports that run both ways (move the concept below both packages):\n" + "\n".join(found)


def _write(root: pathlib.Path, files: dict[str, str]) -> None:
  for name, text in files.items():
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text)


def test_the_check_finds_two_way_imports_cycles_and_lazy_imports(tmp_path):
  """A made-up package with every kind of breach: each is found and named by file and line."""
  _write(tmp_path, {
      "pkg/__init__.py": "",
      "pkg/a/__init__.py": "",
      "pkg/a/x.py": "import os\nfrom pkg.b import y\n",
      "pkg/b/__init__.py": "",
      "pkg/b/y.py": "def f():\n  from pkg import a\n",          # inside a function: counts too
      "pkg/c.py": "import pkg.d.z\n",
      "pkg/d/__init__.py": "",
      "pkg/d/z.py": "from .. import e\n",                            # relative: pkg.e
      "pkg/e.py": "from pkg import c\n",                             # c -> d -> e -> c
      "pkg/terminal.py": "from pkg.d import z\n",
      "pkg/main.py": "from pkg import a, b, c\n",
      "pkg/f.py": "from pkg import main\n",
  })
  edges = package_graph(tmp_path / "pkg")
  assert edges["a", "b"] == ["pkg/a/x.py:2 imports pkg.b.y"]
  assert edges["b", "a"] == ["pkg/b/y.py:2 imports pkg.a"]
  assert edges["d", "e"] == ["pkg/d/z.py:1 imports pkg.e"]
  assert ("a", "os") not in edges and ("main", "a") in edges
  assert problems(edges) == [
      "a <-> b: pkg/a/x.py:2 imports pkg.b.y; pkg/b/y.py:2 imports pkg.a",
      "cycle a -> b -> a: pkg/a/x.py:2 imports pkg.b.y; pkg/b/y.py:2 imports pkg.a",
      "cycle c -> d -> e -> c: pkg/c.py:1 imports pkg.d.z; pkg/d/z.py:1 imports pkg.e; pkg/e.py:1 imports pkg.c",
      "f imports the entry point main: pkg/f.py:1 imports pkg.main",
      "the leaf terminal imports d: pkg/terminal.py:1 imports pkg.d.z",
  ]
