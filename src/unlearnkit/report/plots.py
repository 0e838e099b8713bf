"""The report's figures (matplotlib, Agg), as PNG bytes; one panel per (dataset, model, task).

* ``trilemma``: Mirage's unlearning trilemma: retained utility (Acc_r) against ΔLPR at the
  penultimate layer, coloured by forget accuracy (y_u); retrain sits at ΔLPR = 0;
* ``layerwise``: ΔLPR per audited layer, one line per method (where does the residue live?);
* ``runtime``: method wall time (log scale) against Gap to retrain (lower is better).
Means over seeds; error bars are one standard deviation.
"""
from __future__ import annotations

import io
import math

from ..plotting import literal_text
from ..results import RETRAIN
from .stats import stat
from .tables import block_name, forget_acc_yu, group, layer, metric

PANEL = (5.2, 4.0)


def _figure(n: int):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(PANEL[0] * cols, PANEL[1] * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return plt, fig, list(axes.flat[:n])


def _png(plt, fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()


def _means(recs, get):
    s = stat(get(r) for r in recs)
    return (s.mean, s.std) if s else (None, None)


@literal_text
def trilemma(records) -> bytes | None:
    groups = {b: ms for b, ms in group(records).items()
              if any(layer("delta_lpr")(r) is not None for rs in ms.values() for r in rs)}
    if not groups:
        return None
    plt, fig, axes = _figure(len(groups))
    for ax, (block, methods) in zip(axes, groups.items()):
        xs, ys, cs, names = [], [], [], []
        for m, recs in methods.items():
            x, _ = _means(recs, metric("test_retain_acc"))
            y, ye = _means(recs, layer("delta_lpr"))
            c, _ = _means(recs, forget_acc_yu)
            if m == RETRAIN and x is not None:
                y, ye = 0.0, 0.0
            if x is None or y is None:
                continue
            ax.errorbar(x, y, yerr=ye, fmt="none", ecolor="0.7", lw=0.8, zorder=1)
            xs.append(x), ys.append(y), cs.append(c if c is not None else 0.0), names.append(m)
        sc = ax.scatter(xs, ys, c=cs, cmap="viridis_r", vmin=0, vmax=100, s=36, zorder=2,
                        marker="o", edgecolors="k", linewidths=0.4)
        for x, y, n in zip(xs, ys, names):
            ax.annotate(n, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.axhline(0, color="0.5", lw=0.6, ls="--")
        ax.set(xlabel="retained utility Acc_r (%)", ylabel="ΔLPR penultimate (points)", title=block_name(block))
        ax.title.set_fontsize(9)
        fig.colorbar(sc, ax=ax, label="forget acc y_u (%)")
    return _png(plt, fig)


@literal_text
def layerwise(records) -> bytes | None:
    groups = {b: ms for b, ms in group(records).items()
              if any(r.audit and r.audit.get("layers") and r.method != "retrain" for rs in ms.values() for r in rs)}
    if not groups:
        return None
    plt, fig, axes = _figure(len(groups))
    cmap = plt.get_cmap("tab20")
    for ax, (block, methods) in zip(axes, groups.items()):
        i = 0
        for m, recs in methods.items():
            audited = [r for r in recs if r.audit and r.audit.get("layers") and m != "retrain"]
            if not audited:
                continue
            names = list(audited[0].audit["layers"])
            means = [_means(audited, layer("delta_lpr", n))[0] for n in names]
            style = {"color": "k", "lw": 2, "ls": "--"} if m == "original" else {"color": cmap(i % 20), "lw": 1}
            ax.plot(range(len(names)), [math.nan if v is None else v for v in means], marker="o", ms=3,
                    label=m, **style)
            ax.set_xticks(range(len(names)), names, fontsize=7)
            i += m != "original"
        ax.axhline(0, color="0.5", lw=0.6)
        ax.set(ylabel="ΔLPR (points)", title=block_name(block))
        ax.title.set_fontsize(9)
        ax.legend(fontsize=5, ncol=2, loc="best")
    return _png(plt, fig)


@literal_text
def runtime(records) -> bytes | None:
    groups = {b: ms for b, ms in group(records).items()
              if any(m not in ("original", "retrain") for m in ms)}
    if not groups:
        return None
    plt, fig, axes = _figure(len(groups))
    for ax, (block, methods) in zip(axes, groups.items()):
        for m, recs in methods.items():
            if m == "original":
                continue
            x, _ = _means(recs, metric("runtime_s"))
            y, ye = _means(recs, metric("gap"))
            if x is None or y is None or x <= 0:
                continue
            ax.errorbar(x, y, yerr=ye, fmt="*" if m == RETRAIN else "o", ms=8 if m == RETRAIN else 4,
                        color="C3" if m == RETRAIN else "C0", ecolor="0.7", lw=0.8)
            ax.annotate(m, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.set_xscale("log")
        ax.set(xlabel="wall time (s, log)", ylabel="Gap to retrain (%) ↓", title=block_name(block))
        ax.title.set_fontsize(9)
    return _png(plt, fig)


FIGURES = [("trilemma", "The trilemma: retained utility vs ΔLPR vs forget accuracy", trilemma),
           ("layerwise", "Layer-wise ΔLPR per method", layerwise),
           ("runtime", "Runtime vs quality (Gap to retrain)", runtime)]


def build_figures(records) -> list[tuple[str, str, bytes]]:
    out = []
    for key, title, fn in FIGURES:
        png = fn(records)
        if png:
            out.append((key, title, png))
    return out
