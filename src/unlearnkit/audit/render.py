"""``write_audit(report, out_dir)``: audit.json, audit.md and a self-contained audit.html.

Every file is written atomically (``checkpoints.atomic_write_text``); the HTML embeds its
matplotlib figures as base64 PNGs, so it can be mailed or archived as one file. The PCA view is
projected here, from the rows the audit keeps for it (``AuditReport.embedding``); the tables come
from :mod:`unlearnkit.audit.tables`.
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path

import numpy as np

from ..checkpoints import atomic_write_text
from ..markdown import markdown_table
from ..plotting import LITERAL, literal_legend, literal_text
from .report import AuditReport
from .tables import check_rows, html_table, idi_rows, layer_rows, model_rows, reference_rows, relearning_rows
from .vfl import transmitted_html, transmitted_markdown

EXPLAIN = [
    ("checks", "every statistic the verdict reads, measured the same way on the unlearned model, the original and "
               "each retrained reference, from draws of the audit seed: oriented so that more = more of the forgotten "
               "data. 'kept [CI]' is the kept fraction (unlearned − references' mean) / (original − references' mean) "
               "with its 95 % interval (0 = like the references, 1 = like the original); 'certified' = the interval "
               "lies inside ± the margin (kept_margin); 'flagged above/below' = beyond the references' prediction "
               "bound (Holm within the family) by more than the margin; 'told apart above/below' = beyond the "
               "bound at the told-apart level (told_apart_level, Holm) by less than the margin (not flagged, not "
               "erased); 'cannot test' = the original is not far "
               "enough from the references, relative to their spread, for a retrain to be certified there; the "
               "'joint' row: every informative statistic together, the cube root of the mean squared standardised "
               "deviation of the model and of each reference against the others, told apart (not erased) above "
               "the references' prediction bound at joint_level; the 'mlp probe' row: the held-out log loss of an "
               "MLP probe of the forgotten class at the penultimate layer (lower = easier to find), told apart (not "
               "erased) below the references' prediction bound at mlp_probe_level"),
    ("separability (check)", "log U, the Gaussian-unbiased Mahalanobis distance Δμᵀ Σ_w⁻¹ Δμ of forget vs retained "
                             "features at a layer, floored at its own noise level; no rescaling, permutation or "
                             "mixing of units that leaves the model's function unchanged can move it"),
    ("kernel probe (check)", "log held-out d'² of a kernel Fisher discriminant (RBF or degree-2 polynomial kernel on "
                             "whitened features, landmark rows and splits from the audit seed): a non-linear "
                             "read-out of the forget rows, measured on rows it was not fitted on"),
    ("relearning (check)", "mean log-odds of the true class on held-out forget rows after a few SGD steps of a "
                           "canonical copy (unit-norm incoming weights, units sorted) from a few shots of each class, "
                           "over a sweep of budgets and two learning rates; shots drawn from the audit seed. Sample "
                           "requests: the shots are a random half of the forget rows with their own (for flipped "
                           "labels: wrong) labels, read on the other half"),
    ("head re-fit / head relearning (check)", "a head re-fitted (LDA, one shot) or the model's own head relearnt "
                                              "(SGD in whitened coordinates) on frozen penultimate features; mean "
                                              "log-odds of the class on held-out forget rows"),
    ("BatchNorm re-estimated (check)", "mean log-odds of the forget rows' labels after re-estimating every "
                                       "BatchNorm's statistics on retained rows"),
    ("output confidence / agreement (check)", "the mean logit-scaled confidence log(p_y / (1 − p_y)) on the forget "
                                              "rows; and −atanh of its correlation, example by example, with the "
                                              "other references' mean (outputs ordered as a retrain's?)"),
    ("output membership (check)", "sample requests: LiRA's offline per-example test, z = (φ − the references' mean "
                                  "for that example) / their spread, as a root mean square over the forget rows "
                                  "(each reference against the others): departures example by example, either way"),
    ("sep. ratio [CI]", "reported: U of the unlearned model over the references' mean, with an interval for the "
                        "audit data's sampling noise (not the seed-to-seed spread, which the checks use)"),
    ("ΔAUROC [CI]", "reported: held-out AUROC (points) of a linear (LDA) discriminant telling forget from retained "
                    "samples, unlearned − retrained, paired over resplits (it saturates at 99 %+ for a retrain)"),
    ("LPR / ΔLPR", "Mirage's numbers, reported as the paper defines them: balanced accuracy (%) of its "
                   "StandardScaler + logistic probe and its difference to retrain"),
    ("CKA orig. / CKA retr.", "linear CKA of this layer's standardised features to the original / retrained "
                              "model on the same samples (1 = the same representation up to rotation and "
                              "per-unit scale)"),
    ("MMD² ratio [CI]", "reported when asked for (AuditConfig.mmd): the unbiased kernel MMD² of forget vs retained "
                        "features over the references' mean, Fieller's 95 % interval"),
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
    lines = [f"# Unlearning audit: **{d.get('verdict_line') or d['verdict']}**", "",
             f"{t['dataset']}, forget {t['forget']['kind']} "
             f"{t['forget']['classes'] or t['forget']['random'] or t['forget']['indices_file']}; "
             f"{d['models']['retrained']['n']} retrained reference(s); audit seed {d.get('audit_seed')} (repeat the "
             f"audit with it); margin: kept fraction {d['checks']['kept_margin']:g}; CKA {d['cka']}.", "",
             "The verdict reads both audit data (the training split's forget rows and, with a forgotten class, the "
             f"test set); the tables show the **{d['rests_on']}** data first: {d['rests_on_reason']}.", "",
             "## Evidence", ""]
    lines += [f"- {e}" for e in d["evidence"]]
    if d.get("references_needed"):
        lines += ["", f"About {d['references_needed']} references would decide, if the values stayed as measured."]
    if check_rows(d):
        lines += ["", "## What the verdict reads", ""] + markdown_table(*check_rows(d))
    if relearning_rows(d):
        lines += ["", "## Relearning (accuracy, reported)", ""] + markdown_table(*relearning_rows(d))
    if reference_rows(d):
        lines += ["", "## References", ""] + markdown_table(*reference_rows(d)) + _scope_lines(d)
    for name, ad in d["audit_data"].items():
        lines += ["", f"## Layers, {name} data (reported)", "",
                  f"{ad['protocol']}: {ad['n_forget']} forget / {ad['n_retain']} retained samples.", ""]
        lines += markdown_table(*layer_rows(ad))
    lines += transmitted_markdown(d.get("transmitted"))
    lines += ["", "## Models", ""]
    lines += markdown_table(*model_rows(d))
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


_OFFSETS = {"test": -0.12, "train": 0.12}  # the two audit data side by side at each layer
_PCA_ROLES = ("original", "unlearned", "retrained")


def _pca2(x: np.ndarray) -> np.ndarray:
    """The rows of ``x`` on its first two principal components (zeros with fewer than 2 rows, a zero
    column for a 1-D ``x``)."""
    x = x - x.mean(0, keepdims=True)
    if x.shape[0] < 2:
        return np.zeros((x.shape[0], 2))
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    comp = x @ vt[:2].T
    if comp.shape[1] < 2:
        comp = np.pad(comp, ((0, 0), (0, 2 - comp.shape[1])))
    return comp


def _intervals(ax, report: AuditReport, stat: str, drawable=lambda iv: True) -> None:
    """Each probed layer's ``stat`` interval of the unlearned model as an error bar and the original's
    point estimate (``{stat}_original``) as a grey cross, for every audit data; ``drawable`` leaves out
    intervals the axis cannot show."""
    for data, rs in report.layers.items():
        pts = [(i, r) for i, r in enumerate(rs)
               if r.probed and getattr(r, stat) is not None and drawable(getattr(r, stat))]
        if not pts:
            continue
        xs = [i + _OFFSETS.get(data, 0.0) for i, _ in pts]
        ivs = [getattr(r, stat) for _, r in pts]
        # a bootstrap percentile interval need not contain its point estimate (a skewed statistic on few
        # samples): the bar then ends at the estimate instead of reaching back past it
        err = [[max(0.0, v.value - v.low) for v in ivs], [max(0.0, v.high - v.value) for v in ivs]]
        ax.errorbar(xs, [v.value for v in ivs], yerr=err, fmt="o", capsize=4,
                    label=f"unlearned ({data} data)")
        ax.plot(xs, [getattr(r, f"{stat}_original").value for _, r in pts], "x", color="grey",
                label=f"original ({data} data)" if data == report.rests_on else None)


def _draw_delta_auroc(ax, report: AuditReport) -> None:
    """Layer-wise ΔAUROC with its CIs on both audit data and the original (reported, read by no rule)."""
    _intervals(ax, report, "delta_auroc")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(report.layer_names)), report.layer_names, **LITERAL)
    ax.set_ylabel("ΔAUROC vs retrain (points)")
    ax.set_title(f"Layer-wise ΔAUROC (LDA probe, reported), {report.config.confidence:.0%} CI")
    literal_legend(ax.legend(fontsize=7))


_FAMILY_COLOUR = {"output": "tab:purple", "representation": "tab:blue", "relearning": "tab:orange",
                  "heads": "tab:green", "batchnorm": "tab:brown"}


def _draw_kept(ax, report: AuditReport) -> None:
    """What the verdict reads: every testable check's kept fraction with its interval, coloured by family, the
    margin band ±kept_margin and the original at 1; checks that cannot be tested are left out."""
    cs = [c for c in report.checks if c.testable and math.isfinite(c.result.kept)]
    margin = report.config.kept_margin
    ax.axhspan(-margin, margin, color="tab:green", alpha=0.12, label=f"certified inside ±{margin:g}")
    ax.axhline(0, color="black", lw=0.8)
    ax.axhline(1, color="grey", lw=0.8, ls=":", label="the original (1)")
    for fam, colour in _FAMILY_COLOUR.items():
        pts = [(i, c) for i, c in enumerate(cs) if c.measure.family == fam]
        if not pts:
            continue
        xs = [i for i, _ in pts]
        ys = [c.result.kept for _, c in pts]
        lo = [max(0.0, c.result.kept - c.result.kept_low) if math.isfinite(c.result.kept_low) else 0.0 for _, c in pts]
        hi = [max(0.0, c.result.kept_high - c.result.kept) if math.isfinite(c.result.kept_high) else 0.0
              for _, c in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", ms=3, capsize=2, color=colour, label=fam)
    ax.set_xticks(range(len(cs)), [f"{c.measure.name[:18]} {c.measure.layer or ''} {c.measure.data[:2]}"
                                   for c in cs], rotation=90, fontsize=6, **LITERAL)
    lim = max([1.2] + [abs(c.result.kept) + 0.2 for c in cs if abs(c.result.kept) < 5])
    ax.set_ylim(-lim, lim)
    ax.set_ylabel("kept fraction of the original's excess")
    ax.set_title(f"What the verdict reads: {len(cs)} testable checks — verdict: {report.verdict}")
    literal_legend(ax.legend(fontsize=7, ncol=3))


def _draw_cka(ax, report: AuditReport) -> None:
    """CKA to the original and to retrain per layer (solid: the data the verdict rests on), and the
    references' CKA to the original for scale."""
    x = range(len(report.layer_names))
    for data, rs in report.layers.items():
        ls = "-" if data == report.rests_on else ":"
        ax.plot(x, [r.cka_original for r in rs], "o" + ls, color="tab:red", label=f"to original ({data})")
        ax.plot(x, [r.cka_retrain for r in rs], "s" + ls, color="tab:blue", label=f"to retrain ({data})")
    ax.plot(x, [r.cka_retrain_original for r in report.layers[report.rests_on]], "--", color="grey",
            label="retrain to original")
    ax.set_xticks(x, report.layer_names, **LITERAL)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("linear CKA" + (" (centered)" if report.config.center else " (uncentered)"))
    ax.set_title("Representation similarity per layer")
    literal_legend(ax.legend(fontsize=7))


def _draw_embedding(axes, report: AuditReport) -> None:
    """2-D PCA (:func:`_pca2`) of forget vs retained penultimate features, one panel per model, from the
    sample of the verdict's audit data the report keeps (``AuditReport.embedding``)."""
    emb = report.embedding
    mask = emb.get("is_forget")
    for ax, role in zip(axes, _PCA_ROLES):
        feats = emb.get(role)
        if feats is None or mask is None:
            ax.set_axis_off()
            continue
        z = _pca2(np.asarray(feats, dtype=np.float64))
        ax.scatter(z[~mask, 0], z[~mask, 1], s=4, alpha=0.35, c="tab:blue", label="retained")
        ax.scatter(z[mask, 0], z[mask, 1], s=6, alpha=0.8, c="tab:red", label="forget")
        ax.set_title(f"{role} ({report.penultimate})", fontsize=9, **LITERAL)
        ax.set_xticks([])
        ax.set_yticks([])
    literal_legend(axes[0].legend(fontsize=7))


@literal_text
def figures(report: AuditReport) -> dict[str, str]:
    """Base64 PNGs: ``kept``, ``delta_auroc``, ``cka``, ``embedding``."""
    import matplotlib.pyplot as plt  # lazy: heavy, and literal_text selects the Agg backend first

    figs = {}
    for name, size, draw in (("kept", (9, 4.2), _draw_kept), ("delta_auroc", (7, 3.6), _draw_delta_auroc),
                             ("cka", (7, 3.4), _draw_cka)):
        fig, ax = plt.subplots(figsize=size)
        draw(ax, report)
        figs[name] = _png(fig)
    fig, axes = plt.subplots(1, len(_PCA_ROLES), figsize=(10, 3.4))
    _draw_embedding(axes, report)
    figs["embedding"] = _png(fig)
    return figs


def audit_html(report: AuditReport) -> str:
    d = report.to_dict()
    if _nothing_measured(report):
        return ("<!doctype html><html><head><meta charset='utf-8'><title>unlearnkit audit</title></head><body>"
                f"<h1>Verdict: {html.escape(d['verdict'])}</h1><ul>"
                + "".join(f"<li>{html.escape(e)}</li>" for e in d["evidence"]) + "</ul></body></html>\n")
    figs = figures(report)
    colour = {"erased": "#1a7f37", "suppressed": "#b35900", "overforgotten": "#b35900", "collapsed": "#8b0000",
              "not_forgotten": "#cf222e", "inconclusive": "#57606a"}.get(d["verdict"], "#000")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>unlearnkit audit</title><style>"
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}"
        "td:first-child,th:first-child{text-align:left}"
        ".verdict{font-size:26px;font-weight:bold}</style></head><body>",
        f"<p class='verdict' style='color:{colour}'>Verdict: {html.escape(d.get('verdict_line') or d['verdict'])}</p>",
        f"<p>The verdict reads both audit data; tables show the <b>{html.escape(d['rests_on'])}</b> data first: "
        f"{html.escape(d['rests_on_reason'])}. Audit seed {d.get('audit_seed')}; margin: kept fraction "
        f"{d['checks']['kept_margin']:g}. CKA: {html.escape(d['cka'])}.</p>",
        "<h2>Evidence</h2><ul>" + "".join(f"<li>{html.escape(e)}</li>" for e in d["evidence"]) + "</ul>",
        f"<img alt='kept fraction per check' src='data:image/png;base64,{figs['kept']}'>",
        "<p>What the verdict reads: every testable check's kept fraction (0 = like the retrained references, 1 = "
        "like the original) with its 95 % interval; erased needs every interval inside the green band and "
        "none told apart from the references, one statistic at a time, all together (the joint row) or by the MLP "
        "probe (its row, where it ran).</p>",
        ("<h2>What the verdict reads</h2>" + html_table(*check_rows(d))) if check_rows(d) else "",
        ("<h2>Relearning (accuracy, reported)</h2>" + html_table(*relearning_rows(d))) if relearning_rows(d) else "",
        ("<h2>References</h2>" + html_table(*reference_rows(d))
         + "".join(f"<p>{html.escape(x)}</p>" for x in _scope_lines(d) if x)) if reference_rows(d) else "",
        f"<img alt='layer-wise delta AUROC' src='data:image/png;base64,{figs['delta_auroc']}'>",
        f"<img alt='CKA per layer' src='data:image/png;base64,{figs['cka']}'>",
    ]
    for name, ad in d["audit_data"].items():
        parts.append(f"<h2>Layers, {html.escape(name)} data (reported)</h2><p>{html.escape(ad['protocol'])}: "
                     f"{ad['n_forget']} forget / {ad['n_retain']} retained samples.</p>")
        parts.append(html_table(*layer_rows(ad)))
    parts.append(transmitted_html(d.get("transmitted")))
    parts.append("<h2>Models</h2>" + html_table(*model_rows(d)))
    parts.append(f"<img alt='PCA embedding' src='data:image/png;base64,{figs['embedding']}'>")
    parts.append(f"<h2>IDI</h2><p>{html.escape(idi_line(d))}</p>")
    if idi_rows(d):
        parts.append(html_table(*idi_rows(d)))
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


def _scope_lines(d: dict) -> list[str]:
    """Who chose the references (:func:`unlearnkit.audit.integrity.scope`), as lines under their table."""
    note = (d.get("references_scope") or {}).get("note")
    return ["", note] if note else []
