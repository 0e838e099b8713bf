"""The Mirage-layout table: Mirage's main-table columns, read from a run's results (one copy).

Mirage (seed 000, ``YuZhenyuLindy/Mirage@63b9f9a`` ``mirage_lib.py::run_single_experiment``,
reference-specs §5) reports per method: Acc_r (accuracy on the retained classes' test images), the
forgotten class's test accuracy (y_u), LPR and ΔLPR = LPR − LPR(retrain), CKA to the original and the
Fisher separability F, all at the features passive parties transmit (the concatenated cut-layer
embedding). :data:`COLUMNS` says what each column reads and how it is written; results.md
(:func:`mirage_table_markdown`, one row per model) and the report's Mirage table
(:func:`unlearnkit.report.tables.mirage_table`, one column per method, mean ± 95 % interval over seeds) both
use it, so one run's numbers are the same in both. The numbers come from the run's audit (no new
measurement), at :func:`unlearnkit.results.main_layer` (``embedding`` for VFL models, the penultimate
layer otherwise), on the audit data its verdict rests on (:func:`unlearnkit.results.verdict_layers`).
The retrain row takes the retrained reference's numbers from an audit of its group
(:func:`unlearnkit.results.retrain_view`): its LPR, F, and CKA to the original.

Differences to Mirage's table: LPR is the mean over the audit's resplits (Mirage: one split, seed
42) and ΔLPR carries its paired interval; CKA is centered unless the audit was run uncentered (the
table says which); the numbers are on the data the verdict rests on, which is the training split
when the test set holds too few forgotten samples (Mirage always probes the test set); sample-level
runs show the training forget accuracy (no forgotten test images).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .markdown import markdown_table
from .results import data_protocol, forget_accuracy, group_audit, main_layer, main_numbers, rests_on, retrain_view


@dataclass(frozen=True)
class Column:
    """One number of the table: ``read(metrics, layer numbers)``, written with ``spec``; ``interval``
    names the layer's interval shown beside it."""

    header: str     # results.md's column
    label: str      # the report's row
    key: str        # the metric's name in the report's summary.csv
    read: Callable[[dict, dict], object]
    spec: str = "{:.1f}"
    interval: str | None = None


COLUMNS = [Column("Acc_r", "Acc_r (%) ↑", "acc_r", lambda m, lay: m.get("test_retain_acc")),
           Column("forget acc", "y_u forget acc (%) ↓", "forget_acc_yu", lambda m, lay: forget_accuracy(m)),
           Column("LPR", "LPR (%)", "lpr", lambda m, lay: lay.get("lpr")),
           Column("ΔLPR [CI]", "ΔLPR (%) [CI]", "delta_lpr", lambda m, lay: lay.get("delta_lpr"), "{:+.1f}",
                  "delta_lpr_ci"),
           Column("CKA orig.", "CKA to original", "cka_original", lambda m, lay: lay.get("cka_original"),
                  "{:.3f}"),
           Column("F", "F (separability)", "separability", lambda m, lay: lay.get("separability"), "{:.3f}")]


def _num(v, fmt: str) -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def _cell(col: Column, metrics: dict, numbers: dict) -> str:
    text = _num(col.read(metrics, numbers), col.spec)
    ci = numbers.get(col.interval) if col.interval else None
    if ci and ci[0] is not None:
        text += f" [{_num(ci[0], col.spec)}, {_num(ci[1], col.spec)}]"
    return text


def mirage_rows(results: dict) -> tuple[list[str], list[list[str]], dict]:
    """Header, rows and notes (layer, data, protocol, CKA kind) of results.md's Mirage table."""
    models = results["models"]
    audited = {name: e["audit"] for name, e in models.items() if main_numbers(e.get("audit"))}
    rows = [[name, *(_cell(col, models[name]["metrics"], main_numbers(a)) for col in COLUMNS),
             a.get("verdict", "")] for name, a in audited.items()]
    ref = group_audit(list(audited.items()))
    if ref is not None and "retrain" in models:
        view = main_numbers(retrain_view(ref))
        cells = [_cell(col, models["retrain"]["metrics"], view) for col in COLUMNS]
        cells[[c.key for c in COLUMNS].index("delta_lpr")] = "0 (reference)"
        rows.insert(1 if rows and rows[0][0] == "original" else 0, ["retrain", *cells, ""])
    last = list(audited.values())[-1] if audited else {}
    notes = {"layer": main_layer(last), "data": rests_on(last), "protocol": data_protocol(last),
             "cka": last.get("cka", "")}
    return ["model", *(c.header for c in COLUMNS), "verdict"], rows, notes


def mirage_table_markdown(results: dict) -> str:
    """The Markdown section (empty when the run has no audit)."""
    header, rows, notes = mirage_rows(results)
    if not rows:
        return ""
    where = ("the concatenated cut-layer embedding the passive parties transmit (`embedding`)"
             if notes["layer"] == "embedding" else f"the `{notes['layer']}` layer")
    data = (f"its {notes['data']} data ({notes['protocol']}), the data its verdict rests on" if notes["data"]
            else "the data its verdict rests on")
    lines = ["", "## Representation (Mirage layout)", "",
             f"Read from the audit at {where}, on {data}" + (f"; CKA {notes['cka']}" if notes["cka"] else "")
             + ". Acc_r = test accuracy on the retained classes, forget acc = test accuracy on the "
             "forgotten classes (training forget set for sample-level forgetting), LPR = linear-probe balanced "
             "accuracy (%) forget vs retained, ΔLPR = LPR − LPR(retrain) with its 95 % paired interval, "
             "F = Fisher separability.", "", *markdown_table(header, rows)]
    return "\n".join(lines) + "\n"
