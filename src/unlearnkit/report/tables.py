"""The report's tables, in the layouts of the seed papers, mean ± 95 % interval over seeds (:mod:`.stats`).

* **verdicts**: every method's audit verdicts per task (an overview, not a paper's table);
* **Mirage** (seed 000, main table): metrics as rows, Retrain then the methods as columns:
  Acc_r (test accuracy on the retained classes), y_u (forget accuracy: on the forgotten test
  samples, Mirage's ``yu_acc``; on the training forget set where the task has no forgotten test
  samples), LPR, ΔLPR with its interval, CKA to the original, F (Fisher separability), all at
  the penultimate layer on the data the audit's verdict rests on;
* **TARF** (seed 002, Table 1): Gap to retrain per task (rows) and method (columns);
* **PURGE** (seed 004): TA (full test set, the forgotten class included, PURGE's convention), FA
  (train forget), RA (train retain), MIA AUROC (0.5 ideal), speedup (retrain time / method time);
* **EC** (seed 001): CKA x 100 to the original at the penultimate layer, IDI (when the audit has
  it), H-Mean of (100 - test forget acc) and test retain acc;
* **layers**: ΔLPR [interval], CKA to the original and to retrain, separability ratio over
  retrain, for every audited layer.

Every cell over n >= 2 seeds is ``mean ± h``, ``h`` the half-width of the 95 % Student-t interval of
the mean over seeds; with one seed, ΔLPR shows the audit's paired interval over probe resplits. Every
number shown is also a row of ``summary.csv`` (``values``), so tables and CSV cannot disagree.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..mirage_table import COLUMNS as MIRAGE_COLUMNS
from ..results import forget_accuracy, layer_value, main_numbers
from .records import REFERENCE_ROWS, Record
from .stats import DASH, Stat, fmt, seed_interval, stat, verdicts

Block = tuple[str, str, str]


@dataclass
class Table:
    key: str
    title: str
    caption: str
    header: list[str]
    rows: list[list[str]]
    block: Block | None = None
    values: list[dict] = field(default_factory=list)


def group(records: list[Record]) -> dict[Block, dict[str, list[Record]]]:
    """``{block: {method: [records over seeds]}}``; retrain and original first, then methods as found."""
    out: dict[Block, dict[str, list[Record]]] = {}
    for r in records:
        out.setdefault(r.block, {}).setdefault(r.method, []).append(r)
    for block, methods in out.items():
        order = [m for m in REFERENCE_ROWS if m in methods] + [m for m in methods if m not in REFERENCE_ROWS]
        out[block] = {m: sorted(methods[m], key=lambda r: r.seed) for m in order}
    return out


def block_name(block: Block) -> str:
    return f"{block[0]} / {block[1]}, {block[2]}"


# --- what a record says -------------------------------------------------------------------------

def metric(key: str):
    return lambda r: r.metrics.get(key)


def forget_acc_yu(r: Record):
    """:func:`unlearnkit.results.forget_accuracy` of the record (Mirage's y_u)."""
    return forget_accuracy(r.metrics)


def layer(key: str, name: str | None = None):
    """A record's ``key`` at layer ``name`` (default: :func:`unlearnkit.results.main_layer`) on the audit
    data its verdict rests on (:func:`unlearnkit.results.layer_value`)."""
    return lambda r: layer_value(r.audit, key, name)


def idi(r: Record):
    v = (r.audit or {}).get("idi")
    return v.get("idi") if isinstance(v, dict) else None


def speedup(r: Record):
    return None if r.method == "original" else r.metrics.get("speedup")


def cka_x100(r: Record):
    v = layer("cka_original")(r)
    return None if v is None else 100 * v


class Collector:
    """Formats cells and keeps every number shown as a CSV row."""

    def __init__(self, table: str) -> None:
        self.table, self.values = table, []

    def cell(self, block: Block, method: str, recs: list[Record], get, metric_name: str, *, spec: str = "{:.1f}",
             suffix: str = "", layer_name: str = "", interval: str | None = None) -> str:
        s = stat(get(r) for r in recs)
        if s is not None and interval is not None:
            s = self._interval(s, recs, interval, layer_name)
        elif s is not None and s.n >= 2:
            s = seed_interval(s)  # the CSV's low / high: the interval the cell's ± stands for
        if s is not None:
            self.values.append({"table": self.table, "dataset": block[0], "model": block[1], "task": block[2],
                                "method": method, "metric": metric_name, "layer": layer_name, "mean": s.mean,
                                "std": s.std, "n": s.n, "low": s.low, "high": s.high})
        return fmt(s, spec, suffix)

    @staticmethod
    def _interval(s: Stat, recs: list[Record], key: str, layer_name: str) -> Stat:
        if s.n >= 2:
            return seed_interval(s)
        ci = next((layer(key, layer_name or None)(r) for r in recs if layer(key, layer_name or None)(r)), None)
        return Stat(s.mean, s.std, s.n, ci[0], ci[1]) if ci and None not in ci else s


# --- the layouts --------------------------------------------------------------------------------

def verdict_table(groups) -> Table:
    blocks = list(groups)
    methods = list(dict.fromkeys(m for b in blocks for m in groups[b] if m != "retrain"))
    rows = [[m] + [verdicts(r.verdict for r in groups[b].get(m, [])) for b in blocks] for m in methods]
    one = len({b[:2] for b in blocks}) == 1  # one dataset and model: the tasks name the columns
    return Table("verdicts", "Audit verdicts" + (f" ({blocks[0][0]} / {blocks[0][1]})" if one else ""),
                 "Verdict of the representation audit per seed (erased, suppressed, collapsed, not_forgotten, "
                 "inconclusive); the original is a positive control.",
                 ["method"] + [b[2] if one else block_name(b) for b in blocks], rows)


def _mirage_reading(col):
    """What a column of the one Mirage table (:data:`unlearnkit.mirage_table.COLUMNS`) reads of a record."""
    return lambda r: col.read(r.metrics, main_numbers(r.audit))


def mirage_table(block: Block, methods: dict[str, list[Record]]) -> Table:
    """The Mirage-layout table of a block (metrics as rows, methods as columns), the columns of
    results.md's Mirage table (:mod:`unlearnkit.mirage_table`)."""
    c = Collector("mirage")
    names = list(methods)
    rows = [[col.label] + [c.cell(block, m, methods[m], _mirage_reading(col), col.key, spec=col.spec,
                                  interval=col.interval) for m in names]
            for col in MIRAGE_COLUMNS]
    rows.append(["verdict"] + [verdicts(r.verdict for r in methods[m]) for m in names])
    return Table("mirage", f"Mirage layout: {block_name(block)}",
                 "Penultimate layer (VFL: the concatenated embedding the passive parties transmit), audit data "
                 "of the verdict; ΔLPR = LPR(unlearned) − LPR(retrain) with, for "
                 "one seed, the audit's paired interval over probe resplits and, for several seeds, the 95 % "
                 "t-interval of the mean over seeds. Retrain's LPR, F and CKA come from the audits of its group.",
                 ["metric"] + names, rows, block, c.values)


FQ_CAPTION = ("Forgetting quality: the NeurIPS 2023 unlearning challenge's final score (its forget score, "
              "scaled by the retain and test accuracy ratios to retrain; higher is better, the retrain control "
              "is the top of the scale), from `unlearnkit forgetting-quality` runs (N unlearning runs against N "
              "retrained models per original), mean ± interval over the originals' seeds (n = {n}); — where "
              "none was run.")


def leaderboard_table(block: Block, methods: dict[str, list[Record]],
                      fq: dict[str, list[float]] | None = None) -> Table:
    """One row per method of a block, the numbers a reader compares first (the leaderboard). ``fq``
    (:func:`unlearnkit.report.fq.load_forgetting_quality` of this block; None: no column) adds the
    forgetting quality, a row for each method that has one."""
    c = Collector("leaderboard")
    cols = [("forget acc (%)", "forget_acc", metric("forget_acc"), "{:.1f}", ""),
            ("test retain acc (%)", "test_retain_acc", metric("test_retain_acc"), "{:.1f}", ""),
            ("Gap ↓", "gap", metric("gap"), "{:.2f}", ""),
            ("MIA AUROC", "mia_auc", metric("mia_auc"), "{:.3f}", ""),
            ("sep. ratio, penultimate", "separability_ratio", layer("separability_ratio"), "{:.2f}", "x"),
            ("speedup", "speedup", speedup, "{:.1f}", "x")]
    header = ["method"] + [col[0] for col in cols[:4]] + (["forgetting quality ↑"] if fq is not None else []) \
        + [col[0] for col in cols[4:]] + ["verdicts"]
    rows = []
    for m, recs in methods.items():
        cells = [c.cell(block, m, recs, get, key, spec=spec, suffix=suffix) for _, key, get, spec, suffix in cols]
        if fq is not None:
            cells.insert(4, c.cell(block, m, fq.get(m, []), float, "forgetting_quality", spec="{:.3f}"))
        rows.append([m] + cells + [verdicts(r.verdict for r in recs) if m != "retrain" else DASH])
    caption = ("Forget accuracy on the training forget set; test accuracy on the retained data; Gap = TARF's mean "
               "|difference| to retrain (forget, retain, test accuracy, MIA efficacy; points); MIA AUROC of "
               "forget-train vs held-out samples (0.5 = indistinguishable); the audit's separability ratio over "
               "retrain at the penultimate layer (1 = as separable as in retrain; — where the layer cannot be "
               "tested: the references themselves do not separate the forget set, as with random forgetting); "
               "speedup = retrain time / method "
               "time; verdicts of the audit per seed. Numbers: mean ± half-width of the 95 % Student-t interval "
               "over seeds.")
    if fq is not None:
        seeds = sorted({len(v) for v in fq.values()})
        caption += " " + FQ_CAPTION.format(n=", ".join(map(str, seeds)) or "0")
    return Table("leaderboard", f"Leaderboard: {block_name(block)}", caption, header, rows, block, c.values)


def tarf_table(groups) -> Table:
    c = Collector("tarf")
    methods = list(dict.fromkeys(m for ms in groups.values() for m in ms if m not in REFERENCE_ROWS))
    rows = [[b[2], f"{b[0]} / {b[1]}"] + [c.cell(b, m, groups[b].get(m, []), metric("gap"), "gap", spec="{:.2f}")
                                          for m in methods] for b in groups]
    return Table("tarf", "TARF layout: Gap to retrain (%, lower is better)",
                 "Gap = ¼(|UA−UA_r| + |RA−RA_r| + |TA−TA_r| + |MIA−MIA_r|) with UA the forget accuracy, "
                 "MIA SalUn's MIA-efficacy, against the retrained model of the same task and seed.",
                 ["task", "data / model"] + methods, rows, None, c.values)


def purge_table(block: Block, methods: dict[str, list[Record]]) -> Table:
    c = Collector("purge")
    cols = [("TA (%)", "test_acc_full", metric("test_acc_full"), "{:.1f}", ""),
            ("FA (%)", "forget_acc", metric("forget_acc"), "{:.1f}", ""),
            ("RA (%)", "retain_acc", metric("retain_acc"), "{:.1f}", ""),
            ("MIA AUROC", "mia_auc", metric("mia_auc"), "{:.3f}", ""),
            ("speedup", "speedup", speedup, "{:.1f}", "x")]
    rows = [[m] + [c.cell(block, m, recs, get, key, spec=spec, suffix=suffix) for _, key, get, spec, suffix in cols]
            for m, recs in methods.items()]
    return Table("purge", f"PURGE layout: {block_name(block)}",
                 "TA on the full test set (forgotten class included), FA on the training forget set, RA on the "
                 "training retain set; MIA AUROC of forget-train vs forget-test samples (0.5 = indistinguishable); "
                 "speedup = retrain time / method time.", ["method"] + [col[0] for col in cols], rows, block,
                 c.values)


def ec_table(block: Block, methods: dict[str, list[Record]]) -> Table:
    c = Collector("ec")
    rows = [[m, c.cell(block, m, recs, cka_x100, "cka_original_x100", spec="{:.2f}"),
             c.cell(block, m, recs, idi, "idi", spec="{:.3f}"), c.cell(block, m, recs, metric("h_mean"), "h_mean")]
            for m, recs in methods.items() if m != "retrain"]
    return Table("ec", f"EC layout: {block_name(block)}",
                 "CKA × 100 to the original at the penultimate layer (VFL: the transmitted embedding; lower = more "
                 "changed), IDI (signed; "
                 f"{DASH} where the audit has none), H-Mean of (100 − test forget acc) and test retain acc.",
                 ["method", "CKA ↓", "IDI ↓", "H-Mean ↑"], rows, block, c.values)


def layer_table(block: Block, methods: dict[str, list[Record]]) -> Table:
    c = Collector("layers")
    rows = []
    for m, recs in methods.items():
        audited = [r for r in recs if r.audit and r.audit.get("layers") and r.method != "retrain"]
        if not audited:
            continue
        for name in audited[0].audit["layers"]:
            rows.append([m, name,
                         c.cell(block, m, audited, layer("delta_lpr", name), "delta_lpr", spec="{:+.1f}",
                                layer_name=name, interval="delta_lpr_ci"),
                         c.cell(block, m, audited, layer("cka_original", name), "cka_original", spec="{:.3f}",
                                layer_name=name),
                         c.cell(block, m, audited, layer("cka_retrain", name), "cka_retrain", spec="{:.3f}",
                                layer_name=name),
                         c.cell(block, m, audited, layer("separability_ratio", name), "separability_ratio",
                                spec="{:.2f}", layer_name=name, interval="separability_ratio_ci")])
    return Table("layers", f"Layer by layer: {block_name(block)}",
                 "Every audited layer, on the audit data of the verdict: Mirage's ΔLPR [interval as in the Mirage "
                 "table], linear CKA (standardised units) to the original and to retrain, and the statistic the "
                 "verdict reads: the Mahalanobis separability over retrain's [bootstrap interval for one seed].",
                 ["method", "layer", "ΔLPR (%) [CI]", "CKA orig.", "CKA retr.", "sep. ratio [CI]"], rows, block,
                 c.values)


def build_tables(records: list[Record], fq: dict[Block, dict[str, list[float]]] | None = None) -> list[Table]:
    """Every table of the report; ``fq`` (forgetting quality per block and method) adds the leaderboard's
    column for it."""
    groups = group(records)
    tables = [verdict_table(groups)] if any(r.verdict for r in records) else []
    tables += [leaderboard_table(b, ms, None if fq is None else fq.get(b, {})) for b, ms in groups.items()]
    tables += [mirage_table(b, ms) for b, ms in groups.items()]
    tables.append(tarf_table(groups))
    tables += [purge_table(b, ms) for b, ms in groups.items()]
    tables += [ec_table(b, ms) for b, ms in groups.items()]
    tables += [t for t in (layer_table(b, ms) for b, ms in groups.items()) if t.rows]
    return tables
