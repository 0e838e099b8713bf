"""The method catalogue as a Markdown page (docs/methods.md), generated from the method registry.

``unlearnkit list methods --markdown`` prints it and ``make docs`` writes it; a test compares the
committed page with :func:`methods_markdown`, so the page cannot drift from the code. Not a method:
importing ``unlearnkit.methods`` imports this module too, and it registers nothing.
"""
from __future__ import annotations

from ..markdown import markdown_table
from .base import METHODS

HEADER = ("name", "aliases", "reference", "needs", "data-parallel", "presets", "tune searches")


def method_rows() -> list[tuple[str, ...]]:
    """One row per registered method (plug-in combinations included), sorted by name: the name, its
    aliases other than the name itself, ``paper``, ``needs``, whether it runs under ``torchrun``
    (``distributed``), the keys of ``PRESETS`` and what ``unlearnkit tune`` searches (``SEARCH_SPACE``)."""
    rows = []
    for name in sorted(METHODS.names()):
        cls = METHODS.get(name)
        aliases = ", ".join(a for a in METHODS.aliases_of(name) if a != name)
        rows.append((f"`{name}`", aliases, " ".join(cls.paper.split()), ", ".join(sorted(cls.needs)),
                     "yes" if cls.distributed else "no", ", ".join(f"`{k}`" for k in cls.PRESETS),
                     ", ".join(f"`{k}`" for k in cls.SEARCH_SPACE) or "—"))
    return rows


def methods_markdown() -> str:
    """The whole page: a title, what it covers, the table (``|`` in a cell escaped), a key to the columns."""
    lines = [
        "# Methods",
        "",
        f"The {len(METHODS)} unlearning methods unlearnkit registers, generated from the method registry by "
        "`unlearnkit list methods --markdown --out docs/methods.md` (`make docs`; do not edit by hand); "
        "back to the [README](../README.md).",
        "",
        *markdown_table(HEADER, method_rows()),
        "",
        "**needs**: the data parts the method reads (it is given only those; `original` is a frozen copy of "
        "the model before unlearning, `val` the validation split). **data-parallel**: it runs under "
        "`torchrun` ([distributed.md](distributed.md)); the others stop with one `error:` line there. "
        "**presets**: `unlearnkit run --preset` / `from_preset(...)`; `reference` is the paper's defaults, "
        "`small` is tuned on the validation split of the bundled data with the small CNN, `test` is the "
        "cheapest setting the conformance suite runs; a file written by `unlearnkit tune` is a preset too. "
        "**tune searches**: the hyperparameters `unlearnkit tune` searches on the validation split "
        "([usage.md](usage.md#tuning-hyperparameters-unlearnkit-tune)). How a method is written and checked: "
        "[adding-a-method.md](adding-a-method.md). **Leaderboard**: every method's numbers on every task, "
        "mean ± 95 % interval over 3 seeds, in [leaderboard.md](leaderboard.md) (generated from the results "
        "store by `unlearnkit report --leaderboard`); what they show: [results.md](results.md).",
        "",
    ]
    return "\n".join(lines)
