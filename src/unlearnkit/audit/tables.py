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
    """(header, rows): one row per layer of ``d["layers"]`` (an audit data entry of audit.json): the numbers
    reported beside the deciding checks (:func:`check_rows`)."""
    mmd = any(v.get("mmd_ratio") is not None or v.get("mmd_ratio_status") for v in d["layers"].values())
    header = ["layer", "sep. ratio [CI]", "orig. sep.", "ΔAUROC [CI]", "LPR", "ΔLPR [CI]", "CKA orig.", "CKA retr."]
    if mmd:
        header += ["MMD² ratio [CI]", "orig. MMD²"]
    rows = []
    for name, v in d["layers"].items():
        aci = v.get("delta_auroc_ci") or [None, None]
        ci = v.get("delta_lpr_ci") or [None, None]
        sci = v.get("separability_ratio_ci") or [None, None]
        row = [
            name, _f(v["separability_ratio"]) + _ci(*sci, fmt="{:.2f}"), _f(v["separability_ratio_original"]),
            _f(v.get("delta_auroc"), "{:+.1f}") + _ci(*aci), _f(v["lpr"], "{:.1f}"),
            _f(v["delta_lpr"], "{:+.1f}") + _ci(*ci), _f(v["cka_original"], "{:.3f}"), _f(v["cka_retrain"], "{:.3f}"),
        ]
        if mmd:
            status = v.get("mmd_ratio_status") or "ok"
            mci = v.get("mmd_ratio_ci") or [None, None]
            row += [(_f(v.get("mmd_ratio")) + _ci(*mci, fmt="{:.2f}")) if status == "ok" else status,
                    _f(v.get("mmd_ratio_original"))]
        rows.append(row)
    return header, rows


def check_state(c: dict) -> str:
    """What a check says, in a word or two: flagged above / below, told apart above / below (certified within the
    margin, yet beyond the references' bound: not erased), certified, not shown, cannot test, reported."""
    if c.get("flag"):
        return f"flagged {c['flag']}"
    if c.get("deviates") and c.get("informative", c.get("testable")):
        return f"told apart {c['deviates']}"
    if not c.get("decides", True):
        return "reported"
    if c.get("unmeasured"):
        return "not measured"
    if not c.get("testable"):
        return "cannot test"
    return "certified" if c.get("within") else "not shown"


def check_rows(d: dict) -> tuple[list[str], list[list[str]]] | None:
    """(header, rows): every deciding statistic (``d["checks"]["items"]``), its values on the unlearned model,
    the original and the references, the kept fraction with its interval, and what it says, then the joint
    told-apart test's row (``d["checks"]["joint"]``, when it ran); None when nothing was judged."""
    items = (d.get("checks") or {}).get("items") or []
    if not items:
        return None
    header = ["family", "statistic", "where", "unlearned", "original", "references", "kept [CI]", "says"]
    rows = []
    for c in items:
        refs = [v for v in c["references"] if v is not None]
        rng = f"{min(refs):.2f}..{max(refs):.2f}" if refs else "n/a"
        kci = c.get("kept_interval") or [None, None]
        kept = (_f(c.get("kept"), "{:+.2f}") + _ci(*kci, fmt="{:+.2f}")) if c.get("kept") is not None else "n/a"
        where = f"{c['layer']}, {c['data']}" if c.get("layer") else c["data"]
        rows.append([c["family"], c["name"], where, _f(c.get("unlearned")), _f(c.get("original")), rng, kept,
                     check_state(c)])
    joint = (d.get("checks") or {}).get("joint")
    if joint:  # the joint told-apart test (audit/joint.py): one more row, over every informative statistic
        refs = joint.get("references") or []
        rng = f"{min(refs):.2f}..{max(refs):.2f}" if refs else "n/a"
        says = (f"told apart (p {joint['p']:.2g})" if joint.get("told_apart")
                else f"within (bound {_f(joint.get('bound'))}, p {joint['p']:.2g})")
        rows.append(["joint", "joint deviation", f"{joint['n_checks']} informative statistics", _f(joint.get("value")),
                     "n/a", rng, "n/a", says])
    probe = (d.get("checks") or {}).get("mlp_probe")
    if probe:  # the MLP probe test (audit/probe_test.py): lower log loss = the class easier to find
        refs = probe.get("references") or []
        rng = f"{min(refs):.4f}..{max(refs):.4f}" if refs else "n/a"
        says = f"{'told apart' if probe.get('told_apart') else 'within'} (p {probe['p']:.2g}, level {probe['level']:g})"
        rows.append(["mlp probe", "held-out log loss", probe["layer"], _f(probe.get("value"), "{:.4f}"), "n/a", rng,
                     "n/a", says])
    return header, rows


def relearning_rows(d: dict) -> tuple[list[str], list[list[str]]] | None:
    """(header, rows): relearning's accuracy (%) per held-out set and cell, for the unlearned model, the original
    and the references' mean (reported beside the deciding log-odds), or None when it did not run."""
    r = (d.get("resurfacing") or {}).get("relearning") or {}
    acc = r.get("accuracy")
    if not acc:
        return None
    cells = list(acc["unlearned"])
    refs = [v for k, v in acc.items() if k.startswith("reference")]
    header = ["relearning (accuracy %)", "unlearned", "original", "references (mean)", "references (max)"]
    rows = []
    for cell in cells:
        vals = [v[cell] for v in refs if v.get(cell) is not None]
        rows.append([cell, _f(acc["unlearned"].get(cell), "{:.1f}"), _f(acc["original"].get(cell), "{:.1f}"),
                     _f(sum(vals) / len(vals) if vals else None, "{:.1f}"), _f(max(vals) if vals else None, "{:.1f}")])
    return header, rows


def reference_rows(d: dict) -> tuple[list[str], list[list[str]]] | None:
    """(header, rows): each reference's provenance (sha256, source, seed, how it was trained)."""
    refs = d.get("references") or []
    if not refs:
        return None
    header = ["reference", "sha256", "source", "seed", "recipe"]
    rows = [[str(i + 1), r.get("sha256", "")[:16], str(r.get("source", "")), str(r.get("seed", "")),
             str(r.get("recipe", ""))[:40]] for i, r in enumerate(refs)]
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
