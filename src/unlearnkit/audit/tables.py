"""The tables of audit.md and audit.html: each one's header and rows of formatted cells, read from
``AuditReport.to_dict()``, and :func:`html_table` for the HTML report.

:mod:`unlearnkit.audit.render` and :mod:`unlearnkit.audit.vfl` (the transmitted-embedding section) both
build their tables here; this module imports neither.
"""
from __future__ import annotations

import html
import math


def _f(x, fmt="{:.2f}") -> str:
    """``x`` formatted, or "n/a" for a missing or non-finite number."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return fmt.format(x)


def _ci(lo, hi, fmt="{:+.1f}") -> str:
    """" [lo, hi]" formatted, or "" without an interval."""
    if lo is None or hi is None:
        return ""
    return f" [{_f(lo, fmt)}, {_f(hi, fmt)}]"


def layer_rows(d: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per layer of ``d["layers"]`` (an audit data entry of audit.json)."""
    mmd = any(v.get("mmd_ratio") is not None or v.get("mmd_ratio_status") for v in d["layers"].values())
    header = ["layer", "ΔAUROC [CI]", "orig. ΔAUROC", "sep. ratio [CI]", "orig. sep. ratio", "LPR", "ΔLPR [CI]",
              "F", "CKA orig.", "CKA retr.", "tolerance"]
    if mmd:
        header += ["MMD² ratio [CI]", "orig. MMD² ratio", "MMD² tolerance"]
    rows = []
    for name, v in d["layers"].items():
        aci = v.get("delta_auroc_ci") or [None, None]
        ci = v.get("delta_lpr_ci") or [None, None]
        sci = v.get("separability_ratio_ci") or [None, None]
        row = [
            name, _f(v.get("delta_auroc"), "{:+.1f}") + _ci(*aci), _f(v.get("delta_auroc_original"), "{:+.1f}"),
            _f(v["separability_ratio"]) + _ci(*sci, fmt="{:.2f}"), _f(v["separability_ratio_original"]),
            _f(v["lpr"], "{:.1f}"), _f(v["delta_lpr"], "{:+.1f}") + _ci(*ci),
            _f(v["separability"], "{:.3f}"), _f(v["cka_original"], "{:.3f}"), _f(v["cka_retrain"], "{:.3f}"),
            f"{_f(v['separability_margin'])}x",
        ]
        if mmd:
            status = v.get("mmd_ratio_status") or "ok"
            mci = v.get("mmd_ratio_ci") or [None, None]
            row += [(_f(v.get("mmd_ratio")) + _ci(*mci, fmt="{:.2f}")) if status == "ok" else status,
                    _f(v.get("mmd_ratio_original")), f"{_f(v.get('mmd_margin'))}x"]
        rows.append(row)
    return header, rows


def model_rows(d: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows): the output and representation numbers of the unlearned, original and retrained models."""
    header = ["model", "forget acc", "retain acc", "test-retain acc", "test-forget acc", "MIA eff.",
              "MIA AUC", "k-NN forget", "k-NN retain", "FID_feat", "cos. to orig."]
    rows = []
    for role in ("unlearned", "original", "retrained"):
        m = d["models"][role]
        o = m["outputs"]
        rows.append([role, _f(o["forget_acc"], "{:.1f}"), _f(o["retain_acc"], "{:.1f}"),
                     _f(o["test_retain_acc"], "{:.1f}"), _f(o["test_forget_acc"], "{:.1f}"),
                     _f(o["mia_efficacy"], "{:.1f}"), _f(o["mia_auc"], "{:.3f}"),
                     _f(m["knn"].get("test_forget"), "{:.1f}"), _f(m["knn"].get("test_retain"), "{:.1f}"),
                     _f(m["fid_feat_to_retrain"], "{:.3g}"), _f(m["cosine_to_original"], "{:.3f}")])
    return header, rows


def output_rows(d: dict) -> tuple[list[str], list[list[str]]] | None:
    """(header, rows) of the output membership test (``d["output_test"]``: one row per aggregate), or None
    when it did not run."""
    o = d.get("output_test")
    if not o:
        return None
    header = ["aggregate", "unlearned", "retrains' range", "original", "decision"]
    if o["status"] in ("too_few_references", "degenerate") or not o.get("mean_z"):
        return header, [["-", "", "", "", f"{o['status']} ({o['num_references']} reference(s))"]]
    rows = []
    for key, label in (("mean_z", "mean z (T1)"), ("log_var_ratio", "log mean z² (T2)")):
        a = o[key]
        lo = "-inf" if a["lower"] is None else _f(a["lower"], "{:+.2f}")
        rows.append([label, _f(a["value"], "{:+.2f}"), f"[{lo}, {_f(a['upper'], '{:+.2f}')}]",
                     _f(a["original"], "{:+.2f}"), "flagged" if a["flagged"] else "within"])
    rows.append(["test", "", "", "flagged" if o["control"] else "within (no power)",
                 f"{o['decision']} ({o['num_examples']} forget examples, {o['num_references']} references)"])
    return header, rows


def resurface_rows(d: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per resurfacing check."""
    header = ["check", "forget acc before", "after", "retrain after", "excess", "resurfaced", "decides", "how"]
    rows = []
    for name, r in d["resurfacing"].items():
        decides = "yes" if r.get("in_verdict", True) else "no (reported)"
        if not r["applicable"]:
            rows.append([name, "", "", "", "", "n/a", decides, r["note"]])
            continue
        rows.append([name, _f(r["forget_acc_before"], "{:.1f}"), _f(r["forget_acc_after"], "{:.1f}"),
                     _f(r["retrain_forget_acc_after"], "{:.1f}"), _f(r["excess"], "{:+.1f}"),
                     "yes" if r["resurfaced"] else "no", decides, r["note"]])
    return header, rows


def idi_rows(d: dict) -> tuple[list[str], list[list[str]]] | None:
    """Per-layer MI estimates of the three models, or None when IDI was not computed."""
    i = d.get("idi") or {}
    if not i.get("mi"):
        return None
    mi = i["mi"]
    header = ["layer", "MI unlearned", "MI original", "MI retrained", "unlearned − retrain"]
    rows = []
    for layer in i["layers"]:
        u, o, r = mi["unlearned"][layer], mi["original"][layer], mi["retrained"][layer]
        rows.append([layer, f"{u['mean']:.3f} ± {u['std']:.3f}", f"{o['mean']:.3f} ± {o['std']:.3f}",
                     f"{r:.3f}", f"{u['mean'] - r:+.3f}"])
    return header, rows


def html_table(header: list[str], rows: list[list[str]]) -> str:
    """``header`` and ``rows`` as an HTML table, every cell escaped."""
    h = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"
