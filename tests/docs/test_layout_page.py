"""docs/layout.md names every module of the package (a module added without a line there fails here)."""
from __future__ import annotations

import re

from runner import ROOT

PACKAGE = ROOT / "src" / "unlearnkit"
#: methods/ holds one file per method: the page says so once instead of naming each
METHOD_FILES = "one file per method"


def test_every_module_is_named_in_layout_md():
    from unlearnkit.methods import METHODS

    page = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    method_modules = {METHODS.get(n).__module__.rsplit(".", 1)[1] for n in METHODS.names()}
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if path.stem in ("__init__", "__main__"):
            continue
        if rel.parts[0] == "methods" and path.stem in method_modules and METHOD_FILES in page:
            continue  # a method's file needs no line of its own
        if not re.search(rf"(?<![\w.]){re.escape(path.stem)}(?![\w])", page):
            missing.append(str(rel))
    assert not missing, f"docs/layout.md does not name these modules: {missing}"
