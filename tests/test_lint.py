"""What a move or a rename leaves behind: no unused import, unused local, undefined name or redefinition in
opd_jax/, benchmarks/, configs/, launch/ and tests/ (pyflakes, its checker run on each file's AST). A deliberate
re-export says so on its line (`# noqa: F401`, or pylint's `unused-import`); a package's __init__.py re-exports its
public names."""
import ast
import pathlib

from pyflakes import checker
from pyflakes import messages

REPO = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = ("opd_jax", "benchmarks", "configs", "launch", "tests")
MARKERS = ("noqa: F401", "unused-import")          # a deliberate re-export, said on the import's line


def findings(path: pathlib.Path, root: pathlib.Path = REPO) -> list[str]:
  """pyflakes' messages for one file, as `path:line: message` (path relative to `root`), in line order, less
  deliberate re-exports."""
  source = path.read_text()
  lines = source.splitlines()
  out = []
  found = checker.Checker(ast.parse(source, str(path)), filename=str(path)).messages
  for m in sorted(found, key=lambda m: (m.lineno, m.col)):
    if isinstance(m, messages.UnusedImport) and (path.name == "__init__.py"
                                                  or any(k in lines[m.lineno - 1] for k in MARKERS)):
      continue
    out.append(f"{path.relative_to(root)}:{m.lineno}: {m.message % m.message_args}")
  return out


def test_no_unused_import_unused_local_or_undefined_name():
  files = sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts)
  assert len(files) > 200
  found = [f for p in files for f in findings(p)]
  assert not found, "pyflakes (remove them, or mark a deliberate re-export `# noqa: F401`):\n" + "\n".join(found)


def test_the_check_sees_what_it_is_for(tmp_path):
  """An unused import, an unused local and an undefined name are found; a marked re-export is not."""
  bad = tmp_path / "bad.py"
  bad.write_text("import os\nimport sys  # noqa: F401\n\n\ndef f():\n  x = 1\n  return y\n")
  got = findings(bad, root=tmp_path)
  assert got == ["bad.py:1: 'os' imported but unused", "bad.py:6: local variable 'x' is assigned to but never used",
                 "bad.py:7: undefined name 'y'"], got

