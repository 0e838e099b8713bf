"""``write_audit(report, out_dir)``: audit.json, audit.md and a self-contained audit.html.

Every file is written atomically (``checkpoints.atomic_write_text``); the HTML embeds its
matplotlib figures as base64 PNGs, so it can be mailed or archived as one file.
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path

from ..checkpoints import atomic_write_text
from ..markdown import markdown_table
from ..plotting import literal_text
from .report import AuditReport
from .vfl import transmitted_html, transmitted_markdown

EXPLAIN = [
    ("ΔAUROC [CI]", "held-out AUROC (points) of a linear (LDA) discriminant telling forget from retained samples "
                    "on this layer's features, unlearned − retrained, with the paired-resplit confidence interval; "
                    "> 0 = the forget data are more recoverable than after retraining. Read by the verdict"),
    ("orig. ΔAUROC", "the same for the original model: the positive control, what a model that kept the "
                     "original representation scores"),
    ("sep. ratio [CI]", "Mahalanobis (LDA-form) Fisher separability Δμᵀ(Σ_w + 0.01 Σ_t)⁺Δμ of the unlearned "
                        "model divided by the retrained model's, with a bootstrap interval; 1 = like retrain. "
                        "Read by the verdict; like ΔAUROC, no rescaling, permutation or mixing of units that "
                        "leaves the model's function unchanged can move it"),
    ("orig. sep. ratio", "the same for the original model (positive control)"),
    ("LPR / ΔLPR", "Mirage's numbers, reported as the paper defines them: balanced accuracy (%) of its "
                   "StandardScaler + logistic probe (mean over the resplits; 50 = no information) and its "
                   "difference to retrain. Not read by the verdict"),
    ("F", "Mirage's trace-form Fisher separability ‖μ_f − μ_r‖² / (Tr Σ_f + Tr Σ_r) of the unlearned model on "
          "raw features. Not read by the verdict: rescaling one unit changes it"),
    ("CKA orig. / CKA retr.", "linear CKA of this layer's standardised features to the original / retrained "
                              "model on the same samples (1 = the same representation up to rotation and "
                              "per-unit scale)"),
    ("tolerance", "the separability ratio a layer may reach before it counts as residual: the default 2.0x, "
                  "widened by the spread of several retrained references"),
    ("k-NN", "cosine k-NN accuracy (%) of penultimate features against the training features (EC)"),
    ("FID_feat", "Fréchet distance of penultimate forget-set features to the retrained model's (PURGE; "
                 "audit.json also has the distance to the original's)"),
    ("cos. to orig.", "mean cosine similarity of penultimate forget-set features to the original's (PURGE)"),
    ("IDI", "Information Difference Index (Jeon et al.): per layer, an InfoNCE critic estimates the mutual "
            "information (nats, at most log 2) between the features and forget-vs-retained membership; IDI = "
            "sum over layers of (unlearned − retrain) / sum of (original − retrain): 0 = retrain-like, "
            "1 = as informative as the original"),
    ("MIA", "SVC-MIA efficacy (% of the forget set predicted non-member, SalUn) and the loss/confidence "
            "AUROC (PURGE, 0.5 ideal)"),
]


def _f(x, fmt="{:.2f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return fmt.format(x)


def _ci(lo, hi, fmt="{:+.1f}") -> str:
    if lo is None or hi is None:
        return ""
    return f" [{_f(lo, fmt)}, {_f(hi, fmt)}]"


def layer_rows(d: dict) -> tuple[list[str], list[list[str]]]:
    header = ["layer", "ΔAUROC [CI]", "orig. ΔAUROC", "sep. ratio [CI]", "orig. sep. ratio", "LPR", "ΔLPR [CI]",
              "F", "CKA orig.", "CKA retr.", "tolerance"]
    rows = []
    for name, v in d["layers"].items():
        aci = v.get("delta_auroc_ci") or [None, None]
        ci = v.get("delta_lpr_ci") or [None, None]
        sci = v.get("separability_ratio_ci") or [None, None]
        rows.append([
            name, _f(v.get("delta_auroc"), "{:+.1f}") + _ci(*aci), _f(v.get("delta_auroc_original"), "{:+.1f}"),
            _f(v["separability_ratio"]) + _ci(*sci, fmt="{:.2f}"), _f(v["separability_ratio_original"]),
            _f(v["lpr"], "{:.1f}"), _f(v["delta_lpr"], "{:+.1f}") + _ci(*ci),
            _f(v["separability"], "{:.3f}"), _f(v["cka_original"], "{:.3f}"), _f(v["cka_retrain"], "{:.3f}"),
            f"{_f(v['separability_margin'])}x",
        ])
    return header, rows


def model_rows(d: dict) -> tuple[list[str], list[list[str]]]:
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


def resurface_rows(d: dict) -> tuple[list[str], list[list[str]]]:
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


def idi_line(d: dict) -> str:
    i = d.get("idi") or {}
    value = i.get("idi")
    head = f"IDI = {value:+.3f}" if value is not None else "IDI: n/a"
    if i.get("id_original") is not None:
        head += f" (ID unlearned {i['id_unlearned']:+.3f}, ID original {i['id_original']:+.3f} nats)"
    return f"{head}. {i.get('note', '')}"


def _nothing_measured(report: AuditReport) -> bool:
    """A broken model's audit (non-finite weights or outputs): a verdict and one line, no numbers."""
    return not report.layers.get(report.rests_on)


def audit_markdown(report: AuditReport) -> str:
    d = report.to_dict()
    if _nothing_measured(report):
        return "\n".join([f"# Unlearning audit: **{d['verdict']}**", "", "## Evidence", "",
                          *[f"- {e}" for e in d["evidence"]]]) + "\n"
    t = d["task"]
    lines = [f"# Unlearning audit: **{d['verdict']}**", "",
             f"{t['dataset']}, forget {t['forget']['kind']} "
             f"{t['forget']['classes'] or t['forget']['random'] or t['forget']['indices_file']}; "
             f"{d['models']['retrained']['n']} retrained reference(s); CKA {d['cka']}.", "",
             f"The verdict rests on the **{d['rests_on']}** data: {d['rests_on_reason']}.", "",
             "## Evidence", ""]
    lines += [f"- {e}" for e in d["evidence"]]
    if d.get("n_forget_needed"):
        lines += ["", f"Roughly {d['n_forget_needed']} forget samples would be needed to decide."]
    for name, ad in d["audit_data"].items():
        note = " (the verdict rests on it)" if name == d["rests_on"] else ""
        lines += ["", f"## Layers, {name} data{note}", "",
                  f"{ad['protocol']}: {ad['n_forget']} forget / {ad['n_retain']} retained samples.", ""]
        lines += markdown_table(*layer_rows(ad))
    lines += transmitted_markdown(d.get("transmitted"))
    lines += ["", "## Models", ""]
    lines += markdown_table(*model_rows(d))
    if d["resurfacing"]:
        lines += ["", "## Resurfacing checks", ""]
        lines += markdown_table(*resurface_rows(d))
    lines += ["", "## IDI", "", idi_line(d)]
    if idi_rows(d):
        lines += [""] + markdown_table(*idi_rows(d))
    lines += ["", "## What each number means", ""]
    lines += [f"- **{k}**: {v}" for k, v in EXPLAIN]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------- plots


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


@literal_text
def figures(report: AuditReport) -> dict[str, str]:
    """Base64 PNGs: ``delta_auroc``, ``separability``, ``cka``, ``embedding``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    figs = {}
    names = report.layer_names
    x = list(range(len(names)))
    # 1. layer-wise ΔAUROC with CIs (both audit data), the original as positive control, tolerance
    fig, ax = plt.subplots(figsize=(7, 3.6))
    offsets = {"test": -0.12, "train": 0.12}
    for data, rs in report.layers.items():
        off = offsets.get(data, 0.0)
        pts = [(i, r) for i, r in enumerate(rs) if r.probed]
        if not pts:
            continue
        xs = [i + off for i, _ in pts]
        vals = [r.delta_auroc.value for _, r in pts]
        err = [[r.delta_auroc.value - r.delta_auroc.low for _, r in pts],
               [r.delta_auroc.high - r.delta_auroc.value for _, r in pts]]
        ax.errorbar(xs, vals, yerr=err, fmt="o", capsize=4, label=f"unlearned ({data} data)")
        ax.plot(xs, [r.delta_auroc_original.value for _, r in pts], "x", color="grey",
                label=f"original ({data} data)" if data == report.rests_on else None)
    rs = report.layers[report.rests_on]
    ax.step([i - 0.5 for i in x] + [len(x) - 0.5], [r.auroc_margin for r in rs] + [rs[-1].auroc_margin],
            where="post", color="red", ls="--", lw=1, label="reference line (not decided on)")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, names)
    ax.set_ylabel("ΔAUROC vs retrain (points)")
    ax.set_title(f"Layer-wise ΔAUROC (LDA probe), {report.config.confidence:.0%} CI — verdict: {report.verdict}")
    ax.legend(fontsize=7)
    figs["delta_auroc"] = _png(fig)
    # 2. separability ratio to retrain per layer (log scale), CIs, the original, tolerance
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for data, rs_ in report.layers.items():
        off = offsets.get(data, 0.0)
        pts = [(i, r) for i, r in enumerate(rs_) if r.probed and r.separability_ratio is not None
               and all(math.isfinite(v) and v > 0
                       for v in (r.separability_ratio.low, r.separability_ratio.high))]
        if not pts:
            continue
        xs = [i + off for i, _ in pts]
        s = [r.separability_ratio for _, r in pts]
        err = [[v.value - v.low for v in s], [v.high - v.value for v in s]]
        ax.errorbar(xs, [v.value for v in s], yerr=err, fmt="o", capsize=4, label=f"unlearned ({data} data)")
        ax.plot(xs, [r.separability_ratio_original.value for _, r in pts], "x", color="grey",
                label=f"original ({data} data)" if data == report.rests_on else None)
    ax.step([i - 0.5 for i in x] + [len(x) - 0.5],
            [r.separability_margin for r in rs] + [rs[-1].separability_margin], where="post", color="red",
            ls="--", lw=1, label="tolerance")
    ax.axhline(1, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(x, names)
    ax.set_ylabel("Mahalanobis separability / retrain's")
    ax.set_title("Separability of the forget data relative to retrain")
    ax.legend(fontsize=7)
    figs["separability"] = _png(fig)
    # 3. CKA to original and to retrain per layer
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for data, rs_ in report.layers.items():
        ls = "-" if data == report.rests_on else ":"
        ax.plot(x, [r.cka_original for r in rs_], "o" + ls, color="tab:red", label=f"to original ({data})")
        ax.plot(x, [r.cka_retrain for r in rs_], "s" + ls, color="tab:blue", label=f"to retrain ({data})")
    ax.plot(x, [r.cka_retrain_original for r in rs], "--", color="grey", label="retrain to original")
    ax.set_xticks(x, names)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("linear CKA" + (" (centered)" if report.config.center else " (uncentered)"))
    ax.set_title("Representation similarity per layer")
    ax.legend(fontsize=7)
    figs["cka"] = _png(fig)
    # 4. 2-D PCA of forget vs retained features at the penultimate layer, for the three models
    emb = report.embedding
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
    mask = emb.get("is_forget")
    for ax, role in zip(axes, ("original", "unlearned", "retrained")):
        z = emb.get(role)
        if z is None or mask is None:
            ax.set_axis_off()
            continue
        ax.scatter(z[~mask, 0], z[~mask, 1], s=4, alpha=0.35, c="tab:blue", label="retained")
        ax.scatter(z[mask, 0], z[mask, 1], s=6, alpha=0.8, c="tab:red", label="forget")
        ax.set_title(f"{role} ({report.penultimate})", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0].legend(fontsize=7)
    figs["embedding"] = _png(fig)
    return figs


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    h = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def audit_html(report: AuditReport) -> str:
    d = report.to_dict()
    if _nothing_measured(report):
        return ("<!doctype html><html><head><meta charset='utf-8'><title>unlearnkit audit</title></head><body>"
                f"<h1>Verdict: {html.escape(d['verdict'])}</h1><ul>"
                + "".join(f"<li>{html.escape(e)}</li>" for e in d["evidence"]) + "</ul></body></html>\n")
    figs = figures(report)
    colour = {"erased": "#1a7f37", "suppressed": "#b35900", "collapsed": "#8b0000",
              "not_forgotten": "#cf222e", "inconclusive": "#57606a"}.get(d["verdict"], "#000")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>unlearnkit audit</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}"
        ".verdict{font-size:26px;font-weight:bold}</style></head><body>",
        f"<p class='verdict' style='color:{colour}'>Verdict: {html.escape(d['verdict'])}</p>",
        f"<p>The verdict rests on the <b>{html.escape(d['rests_on'])}</b> data: "
        f"{html.escape(d['rests_on_reason'])}. CKA: {html.escape(d['cka'])}.</p>",
        "<h2>Evidence</h2><ul>" + "".join(f"<li>{html.escape(e)}</li>" for e in d["evidence"]) + "</ul>",
        f"<img alt='separability ratio per layer' src='data:image/png;base64,{figs['separability']}'>",
        f"<img alt='layer-wise delta AUROC' src='data:image/png;base64,{figs['delta_auroc']}'>",
        f"<img alt='CKA per layer' src='data:image/png;base64,{figs['cka']}'>",
    ]
    for name, ad in d["audit_data"].items():
        parts.append(f"<h2>Layers, {html.escape(name)} data</h2><p>{html.escape(ad['protocol'])}: "
                     f"{ad['n_forget']} forget / {ad['n_retain']} retained samples.</p>")
        parts.append(_html_table(*layer_rows(ad)))
    parts.append(transmitted_html(d.get("transmitted")))
    parts.append("<h2>Models</h2>" + _html_table(*model_rows(d)))
    parts.append(f"<img alt='PCA embedding' src='data:image/png;base64,{figs['embedding']}'>")
    if d["resurfacing"]:
        parts.append("<h2>Resurfacing checks</h2>" + _html_table(*resurface_rows(d)))
    parts.append(f"<h2>IDI</h2><p>{html.escape(idi_line(d))}</p>")
    if idi_rows(d):
        parts.append(_html_table(*idi_rows(d)))
    parts.append("<h2>What each number means</h2><ul>" +
                 "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in EXPLAIN) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_audit(report: AuditReport, out_dir: str | Path) -> dict[str, Path]:
    """Write ``audit.json``, ``audit.md`` and ``audit.html`` into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "audit.json", "md": out / "audit.md", "html": out / "audit.html"}
    atomic_write_text(paths["json"], json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n")
    atomic_write_text(paths["md"], audit_markdown(report))
    atomic_write_text(paths["html"], audit_html(report))
    return paths
