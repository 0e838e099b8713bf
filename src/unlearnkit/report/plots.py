"""The report's figures (matplotlib, Agg), as PNG bytes; panels per (dataset, model, task).

* ``trilemma``: Mirage's unlearning trilemma: retained utility (Acc_r) against ΔLPR at the
  penultimate layer, coloured by forget accuracy (y_u); retrain sits at ΔLPR = 0; with more than
  :data:`NAMED_POINTS` methods the points carry numbers and a key below the panel names them;
* ``layerwise``: ΔLPR per audited layer, one line per method (where does the residue live?);
* ``separability``: the separability ratio to retrain per layer (reported: ``separability_ratio`` and its
  interval from each audit; the verdict reads every statistic's kept fraction, audit.json's ``checks``), one
  marker per method and seed, the original as positive control;
* ``runtime``: method wall time (log scale) against Gap to retrain (lower is better).
The two per-layer figures hold at most :data:`PER_PANEL` methods a panel (a block with more gets
several panels, its methods in report order), so 35 methods stay legible.
Means over seeds; error bars are one standard deviation (the separability figure: each audit's interval).
Names a user chose (methods, tasks, layers) are drawn literally (:data:`..plotting.LITERAL`).
"""
from __future__ import annotations

import io
import math

from ..plotting import LITERAL, literal_legend, literal_text, plain_log_ticks, ratio_ticks
from ..results import RETRAIN
from .stats import stat
from .tables import block_name, forget_acc_yu, group, layer, metric

PANEL = (5.2, 4.0)
WIDE = (7.0, 3.8)  # a per-layer panel: the legend sits to the right of the axes
PER_PANEL = 8      # methods a per-layer panel holds
NAMED_POINTS = 12  # above this many methods, the trilemma's points carry numbers and a key names them


def _figure(n: int, panel=PANEL, max_cols: int = 3, extra_height: float = 0.0):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    cols = min(max_cols, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(panel[0] * cols, (panel[1] + extra_height) * rows),
                             squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return plt, fig, list(axes.flat[:n])


def _chunks(groups: dict, keep) -> list[tuple[tuple, list[str], str]]:
    """``(block, methods, title)`` per panel: each block's methods that ``keep(method)`` accepts, at most
    :data:`PER_PANEL` a panel, in report order; the title says which part of how many methods."""
    panels = []
    for block, methods in groups.items():
        names = [m for m in methods if keep(m)]
        for i in range(0, len(names), PER_PANEL):
            part = names[i:i + PER_PANEL]
            title = block_name(block)
            if len(names) > PER_PANEL:
                title += f" (methods {i + 1}-{i + len(part)} of {len(names)})"
            panels.append((block, part, title))
    return panels


def _legend_right(ax) -> None:
    """The legend outside the axes, on the right, its entries (method names) drawn literally."""
    if ax.get_legend_handles_labels()[0]:
        literal_legend(ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0,
                                 frameon=False))


def _png(plt, fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=80)
    plt.close(fig)
    return buf.getvalue()


def _means(recs, get):
    s = stat(get(r) for r in recs)
    return (s.mean, s.std) if s else (None, None)


def _trilemma_points(methods: dict) -> list[tuple[str, float, float, float, float]]:
    """``(method, Acc_r, ΔLPR, its std, y_u)`` of each method with both numbers (retrain at ΔLPR 0)."""
    points = []
    for m, recs in methods.items():
        x, _ = _means(recs, metric("test_retain_acc"))
        y, ye = _means(recs, layer("delta_lpr"))
        c, _ = _means(recs, forget_acc_yu)
        if m == RETRAIN and x is not None:
            y, ye = 0.0, 0.0
        if x is not None and y is not None:
            points.append((m, x, y, ye, c if c is not None else 0.0))
    return points


def _number_key(plt, ax, names: list[str]) -> None:
    """The key of a figure whose points carry numbers: ``i name`` in three columns below the axes."""
    handles = [plt.Line2D([], [], ls="none") for _ in names]
    literal_legend(ax.legend(handles, [f"{i} {m}" for i, m in enumerate(names, 1)], fontsize=6, ncol=3,
                             loc="upper center", bbox_to_anchor=(0.5, -0.16), handlelength=0,
                             handletextpad=0, columnspacing=1.2, frameon=False))


@literal_text
def trilemma(records) -> bytes | None:
    groups = {b: ms for b, ms in group(records).items()
              if any(layer("delta_lpr")(r) is not None for rs in ms.values() for r in rs)}
    if not groups:
        return None
    points = {b: _trilemma_points(ms) for b, ms in groups.items()}
    most = max(len(ps) for ps in points.values())
    key_rows = math.ceil(most / 3) if most > NAMED_POINTS else 0
    plt, fig, axes = _figure(len(groups), extra_height=0.14 * key_rows)
    for ax, (block, ps) in zip(axes, points.items()):
        numbered = len(ps) > NAMED_POINTS
        for _, x, y, ye, _ in ps:
            ax.errorbar(x, y, yerr=ye, fmt="none", ecolor="0.7", lw=0.8, zorder=1)
        sc = ax.scatter([p[1] for p in ps], [p[2] for p in ps], c=[p[4] for p in ps], cmap="viridis_r", vmin=0,
                        vmax=100, s=36, zorder=2, marker="o", edgecolors="k", linewidths=0.4)
        for i, (m, x, y, _, _) in enumerate(ps, 1):
            ax.annotate(str(i) if numbered else m, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points",
                        **LITERAL)
        if numbered:
            _number_key(plt, ax, [p[0] for p in ps])
        ax.axhline(0, color="0.5", lw=0.6, ls="--")
        ax.set(xlabel="retained utility Acc_r (%)", ylabel="ΔLPR penultimate (points)")
        ax.set_title(block_name(block), fontsize=9, **LITERAL)
        fig.colorbar(sc, ax=ax, label="forget acc y_u (%)")
    return _png(plt, fig)


def _audited(recs) -> list:
    return [r for r in recs if r.audit and r.audit.get("layers")]


def _layer_panels(groups: dict):
    """(panels, plt, fig, axes, cmap) of a per-layer figure: at most a panel's worth of methods each, the
    original drawn in every panel."""
    panels = _chunks(groups, lambda m: m not in ("original", RETRAIN))
    panels = panels or [(b, [], block_name(b)) for b in groups]
    plt, fig, axes = _figure(len(panels), panel=WIDE, max_cols=2)
    return panels, plt, fig, axes, plt.get_cmap("tab10")


@literal_text
def layerwise(records) -> bytes | None:
    groups = {b: ms for b, ms in group(records).items()
              if any(_audited(rs) and m != RETRAIN for m, rs in ms.items())}
    if not groups:
        return None
    panels, plt, fig, axes, cmap = _layer_panels(groups)
    for ax, (block, shown, title) in zip(axes, panels):
        methods = groups[block]
        for i, m in enumerate(["original", *shown]):
            audited = _audited(methods.get(m, []))
            if not audited:
                continue
            names = list(audited[0].audit["layers"])
            means = [_means(audited, layer("delta_lpr", n))[0] for n in names]
            style = {"color": "k", "lw": 2, "ls": "--"} if m == "original" else {"color": cmap((i - 1) % 10), "lw": 1}
            ax.plot(range(len(names)), [math.nan if v is None else v for v in means], marker="o", ms=3,
                    label=m, **style)
            ax.set_xticks(range(len(names)), names, fontsize=7, **LITERAL)
        ax.axhline(0, color="0.5", lw=0.6)
        ax.set_ylabel("ΔLPR (points)")
        ax.set_title(title, fontsize=9, **LITERAL)
        _legend_right(ax)
    return _png(plt, fig)


def _ratio(r, name: str) -> tuple[float, float, float] | None:
    """A record's separability ratio to retrain at layer ``name`` and its interval, as its audit reports
    them (None when missing or not drawable on a log axis)."""
    value, ci = layer("separability_ratio", name)(r), layer("separability_ratio_ci", name)(r)
    low, high = ci if isinstance(ci, (list, tuple)) and len(ci) == 2 else (value, value)
    nums = (value, low, high)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in nums):
        return None
    return nums


@literal_text
def separability(records) -> bytes | None:
    groups = {b: ms for b, ms in group(records).items()
              if any(layer("separability_ratio", n)(r) is not None for m, rs in ms.items() if m != RETRAIN
                     for r in _audited(rs) for n in r.audit["layers"])}
    if not groups:
        return None
    panels, plt, fig, axes, cmap = _layer_panels(groups)
    for ax, (block, shown, title) in zip(axes, panels):
        methods = groups[block]
        drawn = [m for m in ["original", *shown] if _audited(methods.get(m, []))]
        first = _audited(methods[drawn[0]])[0] if drawn else None
        names = list(first.audit["layers"]) if first else []
        for j, m in enumerate(drawn):
            offset = (j - (len(drawn) - 1) / 2) * 0.8 / max(len(drawn), 1)
            style = {"color": "k", "marker": "x"} if m == "original" else {"color": cmap((j - 1) % 10), "marker": "o"}
            label = m
            for r in _audited(methods[m]):
                for i, n in enumerate(names):
                    ratio = _ratio(r, n)
                    if ratio is None:
                        continue
                    v, lo, hi = ratio
                    ax.errorbar(i + offset, v, yerr=[[max(0.0, v - lo)], [max(0.0, hi - v)]], fmt=style["marker"],
                                color=style["color"], ms=4, capsize=2, lw=0.8, label=label)
                    label = None
        ax.axhline(1, color="black", lw=0.8)
        ax.set_yscale("log")
        ratio_ticks(ax.yaxis)  # 0.5×, 1×, 2×, 4×: never 10⁰ or 6×10⁻¹
        ax.set_xticks(range(len(names)), names, fontsize=7, **LITERAL)
        ax.set_xlim(-0.5, len(names) - 0.5)
        ax.set_ylabel("separability ratio to retrain")
        ax.set_title(title, fontsize=9, **LITERAL)
        _legend_right(ax)
    return _png(plt, fig)


@literal_text
def runtime(records) -> bytes | None:
    """Runtime vs Gap per block; above :data:`NAMED_POINTS` methods the points carry numbers and a key
    names them (as the trilemma's)."""
    groups = {b: ms for b, ms in group(records).items()
              if any(m not in ("original", "retrain") for m in ms)}
    if not groups:
        return None
    points = {b: _runtime_points(ms) for b, ms in groups.items()}
    most = max(len(ps) for ps in points.values())
    plt, fig, axes = _figure(len(groups), extra_height=0.14 * math.ceil(most / 3) if most > NAMED_POINTS else 0)
    for ax, (block, ps) in zip(axes, points.items()):
        numbered = len(ps) > NAMED_POINTS
        for i, (m, x, y, ye) in enumerate(ps, 1):
            ax.errorbar(x, y, yerr=ye, fmt="*" if m == RETRAIN else "o", ms=8 if m == RETRAIN else 4,
                        color="C3" if m == RETRAIN else "C0", ecolor="0.7", lw=0.8)
            ax.annotate(str(i) if numbered else m, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points",
                        **LITERAL)
        if numbered:
            _number_key(plt, ax, [p[0] for p in ps])
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.set(xlabel="wall time (s, log)", ylabel="Gap to retrain (%) ↓")
        ax.set_title(block_name(block), fontsize=9, **LITERAL)
    return _png(plt, fig)


def _runtime_points(methods) -> list[tuple]:
    """``(method, runtime, gap, gap error)`` of each method with a positive runtime and a Gap (not the original)."""
    out = []
    for m, recs in methods.items():
        x, _ = _means(recs, metric("runtime_s"))
        y, ye = _means(recs, metric("gap"))
        if m != "original" and x is not None and y is not None and x > 0:
            out.append((m, x, y, ye))
    return out


FIGURES = [("trilemma", "The trilemma: retained utility vs ΔLPR vs forget accuracy", trilemma),
           ("layerwise", "Layer-wise ΔLPR per method", layerwise),
           ("separability", "Separability ratio to retrain per layer (reported; the original as positive control)",
            separability),
           ("runtime", "Runtime vs quality (Gap to retrain)", runtime)]


def build_figures(records) -> list[tuple[str, str, bytes]]:
    out = []
    for key, title, fn in FIGURES:
        png = fn(records)
        if png:
            out.append((key, title, png))
    return out
