"""What a move or a rename leaves behind: no unused import, unused local, undefined name or redefinition in
opd_jax/, benchmarks/, configs/, launch/ and tests/ (pyflakes, its checker run on each file's AST). A deliberate
re-export says so on its line (`# noqa: F401`, or pylint's `unused-import`); a package's __init__.py re-exports its
public names."""
import ast
import pathlib
import re

from pyflakes import checker
from pyflakes import messages

REPO = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = ("opd_jax", "benchmarks", "configs", "launch", "tests")
# A deliberate re-export, said in the comment of the import statement's first line.
MARKER = re.compile(r"#.*(\bnoqa:\s*F401\b|\bpylint:\s*disable=[\w,-]*\bunused-import\b)")


def findings(path: pathlib.Path, root: pathlib.Path = REPO) -> list[str]:
  """pyflakes' messages for one file, as `path:line: message` (path relative to `root`), in line order, less
  deliberate re-exports."""
  source = path.read_text()
  lines = source.splitlines()
  out = []
  found = checker.Checker(ast.parse(source, str(path)), filename=str(path)).messages
  for m in sorted(found, key=lambda m: (m.lineno, m.col)):
    if isinstance(m, messages.UnusedImport) and (
        (path.name == "__init__.py" and m.message_args[0].startswith("opd_jax."))     # a package's public names
        or MARKER.search(lines[m.lineno - 1])):
      continue
    out.append(f"{path.relative_to(root)}:{m.lineno}: {m.message % m.message_args}")
  return out


def test_no_unused_import_unused_local_or_undefined_name():
  files = sorted(p for folder in FOLDERS for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts)
  assert len(files) > 200
  found = [f for p in files for f in findings(p)]
  assert not found, "pyflakes (remove them, or mark a deliberate re-export `# noqa: F401`):\n" + "\n".join(found)


def test_the_check_sees_what_it_is_for(tmp_path):
  """An unused import, an unused local and an undefined name are found; a re-export marked in its comment is not,
  nor an opd_jax name an __init__.py imports; a marker outside the comment or a stdlib import in __init__.py is."""
  bad = tmp_path / "bad.py"
  bad.write_text("import os\nimport sys  # noqa: F401\nimport re  # pylint: disable=g-bad-import-order,unused-import\n"
                 "import json; s = 'noqa: F401'\n\n\ndef f():\n  x = 1\n  return y\n")
  assert findings(bad, root=tmp_path) == [
      "bad.py:1: 'os' imported but unused", "bad.py:4: 'json' imported but unused", "bad.py:8: local variable 'x' is assigned to but never used",
      "bad.py:9: undefined name 'y'"]
  init = tmp_path / "__init__.py"
  init.write_text("import os\nfrom opd_jax.records import PREDICTORS\n")
  assert findings(init, root=tmp_path) == ["__init__.py:1: 'os' imported but unused"]

