"""report.html (one self-contained file: inline CSS, figures as data URIs, no script, nothing fetched),
report.md (figures beside it in ``report_files/``), summary.csv (every number of every table) and
cells.csv (one row per model, seed and task, straight from the records). Files are written atomically.
"""
from __future__ import annotations

import base64
import csv
import html
import io
from pathlib import Path

from ..checkpoints import atomic_write_bytes, atomic_write_text
from ..markdown import markdown_table
from .records import Record
from .tables import Table, layer

ORDER = ["verdicts", "fig:trilemma", "mirage", "tarf", "purge", "fig:runtime", "ec", "fig:layerwise", "layers"]
SECTION = {"verdicts": "Verdicts", "mirage": "Mirage: output vs representation", "tarf": "TARF: Gap per task",
           "purge": "PURGE: utility, forgetting, privacy, speed", "ec": "Erase at the Core: CKA, IDI, H-Mean",
           "layers": "Layer by layer"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2b45;color:#fff;padding:18px 28px 12px}header h1{margin:0 0 6px;font-size:22px}
header p{margin:2px 0;color:#c9d3e6;font-size:13px}nav{margin-top:8px}
nav a{color:#9cc3ff;margin-right:14px;font-size:13px}
main{padding:8px 28px 40px}
section{background:#fff;border:1px solid #dde2ea;border-radius:6px;margin:16px 0;padding:12px 16px}
h2{font-size:17px;margin:4px 0 8px}h3{font-size:14px;margin:14px 0 4px}
.caption{color:#556;font-size:12.5px;margin:2px 0 8px}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:12.5px;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #e4e7ec;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#eef1f6;position:sticky;top:0}td:first-child,th:first-child{text-align:left;font-weight:600}
tr:hover td{background:#f5f8ff}img{max-width:100%;height:auto;border:1px solid #e4e7ec}
.v-erased{color:#0a7a33}.v-suppressed{color:#9a6a00}.v-collapsed,.v-not_forgotten{color:#b3261e}
"""


def _verdict_class(text: str) -> str:
    for v in ("erased", "suppressed", "collapsed", "not_forgotten", "inconclusive"):
        if text.startswith(v):
            return f' class="v-{v}"'
    return ""


def table_html(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.header)
    body = "".join("<tr>" + "".join(f"<td{_verdict_class(c)}>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in t.rows)
    return (f'<h3>{html.escape(t.title)}</h3><p class="caption">{html.escape(t.caption)}</p>'
            f'<div class="scroll"><table class="results" data-table="{t.key}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def table_markdown(t: Table) -> str:
    lines = [f"### {t.title}", "", t.caption, "", *markdown_table(t.header, t.rows)]
    return "\n".join(lines) + "\n"


def _sections(tables: list[Table], figures: list[tuple[str, str, bytes]]):
    """(key, title, tables or figure) in report order."""
    figs = {f"fig:{k}": (title, png) for k, title, png in figures}
    for key in ORDER:
        if key in figs:
            yield key, figs[key][0], figs[key][1]
        else:
            group = [t for t in tables if t.key == key]
            if group:
                yield key, SECTION[key], group


def write_html(path: Path, title: str, meta: list[str], tables, figures) -> None:
    nav, parts = [], []
    for key, heading, content in _sections(tables, figures):
        anchor = key.replace(":", "-")
        nav.append(f'<a href="#{anchor}">{html.escape(heading.split(":")[0])}</a>')
        if isinstance(content, bytes):
            data = base64.b64encode(content).decode()
            body = (f'<img data-figure="{anchor[4:]}" alt="{html.escape(heading)}" '
                    f'src="data:image/png;base64,{data}">')
        else:
            body = "".join(table_html(t) for t in content)
        parts.append(f'<section id="{anchor}"><h2>{html.escape(heading)}</h2>{body}</section>')
    doc = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
           f'content="width=device-width, initial-scale=1"><title>{html.escape(title)}</title><style>{CSS}</style>'
           f"</head><body><header><h1>{html.escape(title)}</h1>"
           + "".join(f"<p>{html.escape(m)}</p>" for m in meta)
           + f"<nav>{''.join(nav)}</nav></header><main>{''.join(parts)}</main></body></html>\n")
    atomic_write_text(path, doc)


def write_markdown(path: Path, title: str, meta: list[str], tables, figures) -> None:
    files = path.parent / "report_files"
    lines = [f"# {title}", ""] + [f"- {m}" for m in meta] + [""]
    for key, heading, content in _sections(tables, figures):
        lines.append(f"## {heading}\n")
        if isinstance(content, bytes):
            name = f"{key[4:]}.png"
            atomic_write_bytes(files / name, lambda f, c=content: f.write(c))
            lines.append(f"![{heading}](report_files/{name})\n")
        else:
            lines += [table_markdown(t) for t in content]
    atomic_write_text(path, "\n".join(lines))


def _csv_text(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(["" if v is None else v for v in row] for row in rows)
    return buf.getvalue()


SUMMARY_COLUMNS = ["table", "dataset", "model", "task", "method", "metric", "layer", "mean", "std", "n", "low",
                   "high"]
CELL_METRICS = ["forget_acc", "retain_acc", "test_acc", "test_acc_full", "test_forget_acc", "test_retain_acc",
                "mia_efficacy", "mia_auc", "gap", "h_mean", "runtime_s", "speedup"]
CELL_AUDIT = ["lpr", "delta_lpr", "cka_original", "cka_retrain", "separability", "separability_ratio"]


def write_csv(out: Path, tables: list[Table], records: list[Record]) -> None:
    rows = [[v[c] for c in SUMMARY_COLUMNS] for t in tables for v in t.values]
    atomic_write_text(out / "summary.csv", _csv_text(SUMMARY_COLUMNS, rows))
    header = ["dataset", "model", "task", "seed", "method", "verdict", *CELL_METRICS,
              *[f"{k}_penultimate" for k in CELL_AUDIT], "idi", "source"]
    cells = []
    for r in records:
        idi = (r.audit or {}).get("idi")
        cells.append([r.dataset, r.model, r.task, r.seed, r.method, r.verdict or "",
                      *[r.metrics.get(k) for k in CELL_METRICS], *[layer(k)(r) for k in CELL_AUDIT],
                      idi.get("idi") if isinstance(idi, dict) else None, r.source])
    atomic_write_text(out / "cells.csv", _csv_text(header, cells))
