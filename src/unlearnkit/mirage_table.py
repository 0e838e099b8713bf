"""The "representation (Mirage layout)" table of ``results.md``: Mirage's main-table columns per model.

Mirage (seed 000, ``YuZhenyuLindy/Mirage@63b9f9a`` ``mirage_lib.py::run_single_experiment``,
reference-specs §5) reports per method: Acc_r (accuracy on the retained classes' test images), the
forgotten class's test accuracy (y_u), LPR and ΔLPR = LPR − LPR(retrain), CKA to the original and the
Fisher separability F, all at the features passive parties transmit (the concatenated cut-layer
embedding). This table reads those numbers from the run's audit (no new measurement): at the
``embedding`` tap for VFL runs, at ``penultimate`` otherwise; on the audit's test-set data
(Mirage's protocol) when the audit probed it, else on its training-split data (sample-level
forgetting: Mirage's 1:1 sample-level draw). The retrain row takes the retrained reference's numbers
from the audits (its LPR, F, and CKA to the original).

Differences to Mirage's table: LPR is the mean over the audit's resplits (Mirage: one split, seed
42) and ΔLPR carries its paired interval; CKA is centered unless the audit was run uncentered (the
table says which); sample-level runs show the training forget accuracy (no forgotten test images).
"""
from __future__ import annotations

import math

from .markdown import markdown_table

COLUMNS = ["model", "Acc_r", "forget acc", "LPR", "ΔLPR [CI]", "CKA orig.", "F", "verdict"]


def mirage_layer(results: dict) -> str:
    """``embedding`` (what the passive parties transmit) for VFL runs, ``penultimate`` otherwise."""
    return "embedding" if results["task"].get("setting") == "vfl" else "penultimate"


def _num(v, fmt: str) -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def _audit_layer(audit: dict, layer: str) -> tuple[str | None, dict | None]:
    """``(data name, layer dict)``: the test-set data when audited, else the training split."""
    for name in ("test", "train"):
        ad = (audit.get("audit_data") or {}).get(name)
        if ad and layer in ad.get("layers", {}):
            return name, ad["layers"][layer]
    return None, None


def _forget_acc(m: dict) -> float | None:
    v = m.get("test_forget_acc")
    return v if v is not None else m.get("forget_acc")


def mirage_rows(results: dict) -> tuple[list[str], list[list[str]], dict]:
    """Header, rows and notes (layer, data, CKA kind) of the Mirage-layout table."""
    layer = mirage_layer(results)
    models = results["models"]
    rows, ref, data_name, protocol, cka = [], None, None, "", ""
    for name, entry in models.items():
        audit = entry.get("audit") or {}
        d, lay = _audit_layer(audit, layer)
        if lay is None:
            continue
        data_name, protocol = d, audit["audit_data"][d].get("protocol", "")
        cka = audit.get("cka", "")
        ref = ref or lay
        ci = lay.get("delta_lpr_ci") or [None, None]
        delta = _num(lay.get("delta_lpr"), "{:+.1f}") + (
            f" [{_num(ci[0], '{:+.1f}')}, {_num(ci[1], '{:+.1f}')}]" if ci[0] is not None else "")
        m = entry["metrics"]
        rows.append([name, _num(m.get("test_retain_acc"), "{:.1f}"), _num(_forget_acc(m), "{:.1f}"),
                     _num(lay.get("lpr"), "{:.1f}"), delta, _num(lay.get("cka_original"), "{:.3f}"),
                     _num(lay.get("separability"), "{:.3f}"), audit.get("verdict", "")])
    if ref is not None and "retrain" in models:
        m = models["retrain"]["metrics"]
        rows.insert(1 if rows and rows[0][0] == "original" else 0,
                    ["retrain", _num(m.get("test_retain_acc"), "{:.1f}"), _num(_forget_acc(m), "{:.1f}"),
                     _num(ref.get("lpr_retrained"), "{:.1f}"), "0 (reference)",
                     _num(ref.get("cka_retrain_original"), "{:.3f}"), _num(ref.get("separability_retrained"),
                                                                             "{:.3f}"), ""])
    return COLUMNS, rows, {"layer": layer, "data": data_name, "protocol": protocol, "cka": cka}


def mirage_table_markdown(results: dict) -> str:
    """The Markdown section (empty when the run has no audit)."""
    header, rows, notes = mirage_rows(results)
    if not rows:
        return ""
    where = ("the concatenated cut-layer embedding the passive parties transmit (`embedding`)"
             if notes["layer"] == "embedding" else "the `penultimate` layer")
    lines = ["", "## Representation (Mirage layout)", "",
             f"Read from the audit at {where}, on its {notes['data']} data ({notes['protocol']}); CKA "
             f"{notes['cka']}. Acc_r = test accuracy on the retained classes, forget acc = test accuracy on the "
             f"forgotten classes (training forget set for sample-level forgetting), LPR = linear-probe balanced "
             f"accuracy (%) forget vs retained, ΔLPR = LPR − LPR(retrain) with its 95 % paired interval, "
             f"F = Fisher separability.", "", *markdown_table(header, rows)]
    return "\n".join(lines) + "\n"
