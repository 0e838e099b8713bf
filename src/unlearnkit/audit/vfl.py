"""Transmitted-embedding diagnostics: the audit of what a VFL model's passive parties send.

Mirage (seed 000, reference-specs §2.5, §5) audits vertical federated unlearning where the risk is
sharpest: the passive parties transmit their embeddings to the active party, so anyone who sees
that traffic can probe it for the "forgotten" labels without ever touching the classifier. Mirage's
features are the concatenated passive embeddings (``mirage_lib.py::extract_features``,
``_intermediate_features['concatenated']``).

A VFL model (:mod:`unlearnkit.models.vfl`) lists those taps in ``unlearnkit_transmitted`` (each
party's embedding and their concatenation, ``embedding``); the audit measures them like every other
layer, and this module pulls them out: their numbers on the data the verdict rests on, and which of
them the verdict flags (a representation check flagged above the references on the data shown,
the very checks :func:`unlearnkit.audit.verdict.suppressed` reads). Nothing is measured twice. Models without
the attribute get an empty dict (no section).
"""
from __future__ import annotations

import html

from torch import nn

from ..markdown import markdown_table
from ..models.vfl import transmitted_layers
from .layers import LayerResult
from .report import layer_dict
from .tables import html_table, layer_rows
from .verdict import Measurements


def transmitted_diagnostics(model: nn.Module, results: dict[str, list[LayerResult]], m: Measurements,
                            rests_on: str) -> dict:
    """``{"layers", "data", "flagged", "summary", "per_layer"}`` for a VFL model, else ``{}``."""
    sample_level = m.sample_level
    names = [n for n in transmitted_layers(model) if any(r.layer == n for r in results[rests_on])]
    if not names:
        return {}
    rows = {r.layer: r for r in results[rests_on] if r.layer in names}
    flagged = sorted({c.measure.layer for c in m.checks if c.measure.family == "representation"
                      and c.measure.data == rests_on and c.measure.layer in rows and c.flag == "above"},
                     key=names.index)
    what = "the forget samples" if sample_level else "the forgotten class"
    if flagged:
        worst = rows[flagged[-1]]
        d = worst.delta_lpr
        summary = (f"what the passive parties transmit still separates {what} beyond retrain at "
                   f"{', '.join(flagged)}: e.g. {worst.layer} LPR {worst.lpr:.1f}% vs retrain's "
                   f"{worst.lpr_retrained:.1f}% (ΔLPR {d.value:+.1f} [{d.low:+.1f}, {d.high:+.1f}]), separability "
                   f"{worst.separability_ratio.value:.2f}x retrain's (Mahalanobis)")
    else:
        e = rows.get("embedding") or rows[names[-1]]
        summary = (f"no transmitted embedding separates {what} beyond retrain's ({e.layer}: LPR "
                   f"{e.lpr:.1f}% vs retrain's {e.lpr_retrained:.1f}%, separability {e.separability_ratio.value:.2f}x "
                   f"retrain's)" if e.probed else "the transmitted embeddings could not be probed (too few samples)")
    return {"layers": names, "data": rests_on, "flagged": flagged, "summary": summary,
            "per_layer": {n: layer_dict(rows[n]) for n in names}}


def transmitted_markdown(d: dict | None) -> list[str]:
    """The audit.md section (no lines for a model that is not VFL)."""
    if not d:
        return []
    return ["", f"## Transmitted-embedding diagnostics (VFL), {d['data']} data", "",
            "What the passive parties send to the active party (each party's embedding and their "
            "concatenation `embedding`, Mirage's audit features): an observer of this traffic can probe it "
            "without the classifier.", "", f"**{d['summary']}**", "",
            *markdown_table(*layer_rows({"layers": d["per_layer"]}))]


def transmitted_html(d: dict | None) -> str:
    """The audit.html section ("" for a model that is not VFL)."""
    if not d:
        return ""
    return (f"<h2>Transmitted-embedding diagnostics (VFL), {html.escape(d['data'])} data</h2>"
            f"<p><b>{html.escape(d['summary'])}</b></p>"
            + html_table(*layer_rows({"layers": d["per_layer"]})))
