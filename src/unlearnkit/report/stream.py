"""The report's section on request streams (``unlearnkit stream``): one table and one figure.

A results.json written by ``unlearnkit stream`` holds ``stream``: per step (request) every method's
record (verdict, accuracies, Gap, separability, cumulative cost, fallback, resurfaced earlier sets).
The results.json files a report reads (each record's ``source``) are read again here for that key;
streams of the same dataset, model and requests are one block, their seeds aggregated:

* table ``stream``: per block, method and step: verdicts over seeds, forget / retain / test accuracy
  and Gap (mean ± 95 % interval over seeds), cumulative cost and retraining's, fallbacks fired, earlier
  forget sets resurfaced;
* figure ``stream``: per block, forget and test accuracy across steps, one line per method (retrain
  dashed), each point marked by the verdict most seeds gave.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ..plotting import LITERAL, literal_text
from .records import Record
from .stats import fmt, seed_interval, stat, verdicts
from .tables import Table

MARKERS = {"erased": "o", "suppressed": "s", "overforgotten": "^", "collapsed": "x", "not_forgotten": "v",
           "inconclusive": "D", None: "."}


def load_streams(records: list[Record]) -> dict[tuple, list[dict]]:
    """``{(dataset, model, requests): [stream of each seed]}`` from the results.json files the records came
    from (those holding a ``stream``); each stream is ``{"seed", "steps", "methods"}``."""
    out: dict[tuple, list[dict]] = {}
    seen = set()
    for r in records:
        path = Path(r.source)
        if r.source in seen or not path.is_file():
            continue
        seen.add(r.source)
        try:
            res = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        stream = res.get("stream") if isinstance(res, dict) else None
        if not isinstance(stream, dict) or not stream.get("steps"):
            continue
        label = "; ".join(s["request"] for s in stream["steps"])
        key = (r.dataset, r.model, f"{label} (fallback {stream.get('fallback', 'none')})")
        out.setdefault(key, []).append({"seed": r.seed, "steps": stream["steps"], "methods": stream["methods"]})
    return out


def _rows(block: tuple, runs: list[dict], values: list[dict]) -> list[list[str]]:
    rows = []
    methods = ["retrain", *runs[0]["methods"]]
    n_steps = min(len(run["steps"]) for run in runs)
    for name in methods:
        for i in range(n_steps):
            recs = [run["steps"][i]["retrain"] if name == "retrain" else run["steps"][i]["methods"].get(name)
                    for run in runs]
            recs = [r for r in recs if r]
            cells = [name, str(i + 1), runs[0]["steps"][i]["request"],
                     "" if name == "retrain" else verdicts(r.get("verdict") for r in recs)]
            for key in ("forget_acc", "retain_acc", "test_acc", "gap"):
                s = stat(r.get(key) for r in recs) if name != "retrain" or key != "gap" else None
                cells.append(fmt(s, "{:.1f}"))
                if s is not None:
                    iv = seed_interval(s) if s.n > 1 else s
                    values.append({"table": "stream", "dataset": block[0], "model": block[1], "task": block[2],
                                   "method": name, "metric": f"step {i + 1} {key}", "layer": "", "mean": s.mean,
                                   "std": s.std, "n": s.n, "low": iv.low, "high": iv.high})
            if name == "retrain":
                cells += [fmt(stat(sum(run["steps"][j]["retrain"]["train_time_s"] for j in range(i + 1))
                                   for run in runs), "{:.0f}"), "", ""]
            else:
                cells += [f"{fmt(stat(r['cumulative_cost_s'] for r in recs), '{:.0f}')} "
                          f"({fmt(stat(r['cumulative_retrain_s'] for r in recs), '{:.0f}')})",
                          f"{sum(bool(r['fallback']) for r in recs)}/{len(recs)}",
                          f"{sum(r['resurfaced'] for r in recs)}/{sum(len(r['earlier']) for r in recs)}"
                          if i else ""]
            rows.append(cells)
    return rows


def stream_table(streams: dict[tuple, list[dict]]) -> list[Table]:
    """One table per stream block: method by step (module docstring)."""
    tables = []
    for block, runs in streams.items():
        values: list[dict] = []
        rows = _rows(block, runs, values)
        tables.append(Table(
            "stream", f"{block[0]} / {block[1]}: {block[2]}",
            f"{len(runs)} seed(s); mean ± 95 % interval over seeds. Each step is audited against references "
            f"retrained without everything deleted so far. Accuracies in %; Gap to that retrain; cumulative "
            f"seconds of unlearning (plus a retrain where the fallback fired), in brackets retraining at every "
            f"step; fallback = seeds where it fired at this step; resurfaced = earlier forget sets above the "
            f"retrain's level again, of those re-checked.",
            ["method", "step", "request", "verdicts", "forget acc", "retain acc", "test acc", "Gap",
             "cumulative s (retrain s)", "fallback", "resurfaced"], rows, block, values))
    return tables


def _majority(recs: list[dict]) -> str | None:
    got = Counter(r.get("verdict") for r in recs if r.get("verdict"))
    return got.most_common(1)[0][0] if got else None


@literal_text
def stream_figure(streams: dict[tuple, list[dict]]) -> bytes | None:
    """Forget and test accuracy across steps per stream block (module docstring), as PNG bytes."""
    if not streams:
        return None
    from .plots import WIDE, _figure, _legend_right, _png

    plt, fig, axes = _figure(2 * len(streams), panel=WIDE, max_cols=2)
    cmap = plt.get_cmap("tab10")
    for b, (block, runs) in enumerate(streams.items()):
        n_steps = min(len(run["steps"]) for run in runs)
        x = list(range(1, n_steps + 1))
        for ax, key, what in ((axes[2 * b], "forget_acc", "forget accuracy"), (axes[2 * b + 1], "test_acc",
                                                                              "test accuracy")):
            ref = [stat(run["steps"][i]["retrain"][key] for run in runs) for i in range(n_steps)]
            ax.plot(x, [s.mean if s else float("nan") for s in ref], "k--", lw=1.5, label="retrain")
            for j, name in enumerate(runs[0]["methods"]):
                recs = [[run["steps"][i]["methods"][name] for run in runs] for i in range(n_steps)]
                ys = [(stat(r[key] for r in rs) or stat([float("nan")])) for rs in recs]
                means = [s.mean if s else float("nan") for s in ys]
                ax.plot(x, means, color=cmap(j % 10), lw=1, label=name)
                for xi, yi, rs in zip(x, means, recs):
                    ax.plot([xi], [yi], marker=MARKERS.get(_majority(rs), "."), color=cmap(j % 10), ms=6)
            ax.set_xticks(x, [runs[0]["steps"][i]["request"] for i in range(n_steps)], fontsize=6, rotation=20,
                          **LITERAL)
            ax.set_ylabel(f"{what} (%)")
            ax.set_title(f"{block[0]} / {block[1]}", fontsize=8, **LITERAL)
        axes[2 * b].set_xlabel("marker: the verdict of most seeds (o erased, s suppressed, v not_forgotten, "
                               "D inconclusive, x collapsed, ^ overforgotten)", fontsize=6)
        _legend_right(axes[2 * b + 1])
    return _png(plt, fig)


def stream_section(records: list[Record]) -> tuple[list[Table], list[tuple[str, str, bytes]]]:
    """``(tables, figures)`` of the streams among the records' results files (nothing without one)."""
    streams = load_streams(records)
    if not streams:
        return [], []
    png = stream_figure(streams)
    figures = [("stream", "Request streams: accuracy and verdict across steps", png)] if png else []
    return stream_table(streams), figures

