"""``make_report(records, out)``: tables, figures and the four files of a report."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from ..checkpoints import atomic_write_text
from .plots import build_figures
from .records import Record
from .stream import stream_section
from .tables import build_tables, group
from .writers import leaderboard_markdown, write_csv, write_html, write_markdown


def _distinct(records: list[Record], key: str) -> str:
    vals = sorted({str(r.provenance.get(key)) for r in records if r.provenance.get(key)})
    return ", ".join(v[:12] if key == "git_commit" else v for v in vals) or "unknown"


def describe(records: list[Record], sources: list[str]) -> list[str]:
    groups = group(records)
    seeds = sorted({r.seed for r in records})
    methods = {r.method for r in records} - {"original", "retrain"}
    return [f"{len(records)} rows: {len(methods)} methods on {len(groups)} dataset/model/task blocks, seeds "
            f"{', '.join(map(str, seeds))}; mean ± half-width of the 95 % Student-t interval over seeds",
            f"from {'; '.join(sources)}",
            f"unlearnkit {_distinct(records, 'unlearnkit_version')}, commit {_distinct(records, 'git_commit')}, "
            f"torch {_distinct(records, 'torch_version')}, device {_distinct(records, 'device')}; written "
            f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}"]


def describe_runs(runs: list[dict]) -> str:
    """One line on the ``unlearnkit bench`` calls that filled the store."""
    parts = []
    for r in runs:
        state = f"{r['wall_s']:.0f} s" if r.get("finished") else "interrupted"
        parts.append(f"#{r['run_id']} {r['started']} {r['executor']} x{r['jobs'] or 1}: {r['n_done']} run, "
                     f"{r['n_skipped']} kept, {r['n_failed']} failed, {state}")
    return "bench calls: " + "; ".join(parts)


def make_report(records: list[Record], out: str | Path, sources: list[str],
                title: str = "unlearnkit benchmark report", runs: list[dict] | None = None, *,
                leaderboard: str | Path | None = None, fq: dict | None = None) -> dict[str, Path]:
    """Write report.html, report.md (+ report_files/), summary.csv and cells.csv into ``out``; with
    ``leaderboard``, also that Markdown page of the leaderboard tables alone; ``fq``: forgetting quality
    per block and method (:func:`unlearnkit.report.fq.load_forgetting_quality`), a leaderboard column."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tables = build_tables(records, fq)
    figures = build_figures(records)
    stream_tables, stream_figures = stream_section(records)  # results of `unlearnkit stream`, if any
    tables, figures = tables + stream_tables, figures + stream_figures
    meta = describe(records, sources) + ([describe_runs(runs)] if runs else [])
    write_html(out / "report.html", title, meta, tables, figures)
    write_markdown(out / "report.md", title, meta, tables, figures)
    write_csv(out, tables, records)
    if leaderboard is not None:
        atomic_write_text(Path(leaderboard), leaderboard_markdown("Leaderboard", meta, tables))
    return {"html": out / "report.html", "md": out / "report.md", "summary": out / "summary.csv",
            "cells": out / "cells.csv", "tables": tables, "figures": figures}
