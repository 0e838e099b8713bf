"""The import contract (design.md, "Which way the imports run"), read from the source with ``ast``.

Every import counts, also one inside a function: a late import hides a cycle, it does not remove
the arrow. Each part of the package has a rank; a module may import only parts of a lower rank,
minus the pairs in ``FORBIDDEN`` (a method never grades itself with the auditor; the auditor does not
know how a model was made; metrics are pure; a report reads results, not code). No two modules
import each other, directly or around a loop, and only ``cli`` speaks typer.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "unlearnkit"

#: bottom to top: a part may import the parts below it
RANKS = [
    ["errors", "_version"],
    ["validate"],
    ["registry", "markdown", "progress", "plotting"],
    ["metrics"],
    ["data"],
    ["models"],
    ["distributed"],
    ["runtime"],
    ["loop"],
    ["batched"],  # K models of one architecture trained together (vmap over stacked weights)
    ["checkpoints"],
    ["evaluation"],
    ["training"],
    ["methods"],
    ["audit"],
    ["results"],
    ["mirage_table"],
    ["api"],  # the Python API (unlearn / audit of the user's model and data); the CLI builds on it
    ["config"],
    ["runner"],
    ["bench", "stream"],  # stream: sequential deletion requests, each step a run's evaluation and audit
    ["report"],
    ["forgetting_quality_experiment", "tune"],
    ["forgetting_quality"],  # the experiment's deprecated name (benchmarks/fq_jobs.py imports it): a re-export
    ["cli"],
    ["__init__", "__main__"],  # the package's public face and ``python -m unlearnkit``
]
RANK = {part: i for i, parts in enumerate(RANKS) for part in parts}

#: (importer, imported) pairs the ranks would allow but the design forbids
FORBIDDEN = {
    ("methods", "training"), ("audit", "methods"), ("audit", "training"), ("audit", "loop"),
    ("report", "runner"), ("report", "bench"), ("report", "config"), ("report", "training"),
    ("report", "methods"), ("report", "audit"), ("report", "stream"),
}
#: metrics are pure functions: nothing of the toolkit but its errors
METRICS_MAY_IMPORT = {"errors"}


def part_of(module: str) -> str:
    """``unlearnkit.audit.core`` -> ``audit``; ``unlearnkit`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the toolkit modules it imports (every import statement, at any depth)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name and t.startswith("unlearnkit"):
                    edges[name].add(t)
    return edges


def violations(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for a, targets in edges.items():
        pa = part_of(a)
        for b in targets:
            pb = part_of(b)
            if pa == pb:
                continue
            if pa == "metrics" and pb not in METRICS_MAY_IMPORT:
                bad.append(f"{a} -> {b}: metrics are pure")
            elif (pa, pb) in FORBIDDEN:
                bad.append(f"{a} -> {b}: {pa} must not import {pb}")
            elif RANK[pb] >= RANK[pa]:
                bad.append(f"{a} -> {b}: {pb} sits above {pa}")
    return sorted(bad)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def edges():
    return imports(modules())


def test_every_part_has_a_rank(edges):
    assert {part_of(m) for m in edges} <= set(RANK), {part_of(m) for m in edges} - set(RANK)


def test_no_arrow_points_up(edges):
    assert violations(edges) == []


def test_no_cycles(edges):
    assert cycles(edges) == []


def test_only_the_cli_speaks_typer():
    users = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
             if "cli" not in p.relative_to(SRC).parts
             and any(isinstance(n, (ast.Import, ast.ImportFrom)) and
                     any("typer" in (a.name or "") for a in n.names) | ("typer" in (getattr(n, "module", "") or ""))
                     for n in ast.walk(ast.parse(p.read_text())))]
    assert users == []


def test_the_checks_catch_an_upward_arrow_a_forbidden_pair_and_a_cycle():
    """The rules above are not vacuous: made-up edges of each kind are reported."""
    made_up = {"unlearnkit.metrics.x": {"unlearnkit.models.zoo"},
               "unlearnkit.audit.core": {"unlearnkit.methods.base"},
               "unlearnkit.data.splits": {"unlearnkit.training"},
               "unlearnkit.models.a": {"unlearnkit.models.b"}, "unlearnkit.models.b": {"unlearnkit.models.a"}}
    found = violations(made_up)
    assert any("metrics are pure" in v for v in found)
    assert any("audit must not import methods" in v for v in found)
    assert any("training sits above data" in v for v in found)
    assert cycles(made_up) == [["unlearnkit.models.a", "unlearnkit.models.b"]]


# --- short functions -----------------------------------------------------------------------------

MAX_LINES, MAX_POSITIONAL = 60, 6
#: a function may be longer or take more positional parameters when its docstring says why, so
WHY = "Why it is long:"


def oversized(path: Path, root: Path = SRC.parent) -> list[str]:
    """Functions over the limits in one file: ``name (lines, positional)``; ``self``/``cls`` not counted."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        lines = node.end_lineno - node.lineno + 1
        positional = node.args.posonlyargs + node.args.args
        n = len(positional) - (1 if positional and positional[0].arg in ("self", "cls") else 0)
        if (lines > MAX_LINES or n > MAX_POSITIONAL) and WHY not in (ast.get_docstring(node) or ""):
            found.append(f"{path.relative_to(root)}::{node.name} ({lines} lines, {n} positional)")
    return found


def test_functions_are_short_and_take_few_positional_parameters():
    found = [f for path in sorted(SRC.rglob("*.py")) for f in oversized(path)]
    assert found == []


def test_the_size_check_sees_a_long_function_and_a_wide_one(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    src = tmp_path / "m.py"
    src.write_text(f"def long():\n{body}\n\n\ndef wide(a, b, c, d, e, f, g):\n    pass\n\n\n"
                   f"def excused(a, b, c, d, e, f, g):\n    '''{WHY} the reference's signature.'''\n")
    assert [f.split("::")[1].split(" ")[0] for f in oversized(src, tmp_path)] == ["long", "wide"]


def _imports_conftest(tree: ast.AST) -> bool:
    """Whether a module imports a ``conftest`` by name (``import conftest`` or ``from conftest import ...``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "conftest":
            return True
        if isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names):
            return True
    return False


def test_no_test_imports_a_conftest_by_name():
    """Several folders hold a ``conftest.py``: ``import conftest`` gets whichever pytest loaded first, so a test that
    passes alone fails when run beside another folder (CI's ``pytest tests/unit/audit tests/integration`` did, stop 60).
    Shared names live in a helper module (``audit_helpers``), which a conftest imports too."""
    tests = Path(__file__).resolve().parents[1]
    bad = [str(p.relative_to(tests)) for p in sorted(tests.rglob("*.py"))
           if _imports_conftest(ast.parse(p.read_text(encoding="utf-8")))]
    assert not bad, bad
    assert _imports_conftest(ast.parse("from conftest import X")) and _imports_conftest(ast.parse("import conftest"))
