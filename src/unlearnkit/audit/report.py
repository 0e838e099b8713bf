"""AuditReport: the verdict, its evidence and every number behind it; ``to_dict`` for results.json."""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .config import AuditConfig
from .layers import Interval, LayerResult
from .tables import html_table, layer_rows

SCHEMA = "unlearnkit.audit/1"


def json_safe(obj: Any) -> Any:
    """Plain JSON types only: NaN/inf -> None, numpy scalars/arrays -> Python, tuples -> lists."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, Interval):
        return json_safe([obj.low, obj.high])
    if hasattr(obj, "to_dict"):
        return json_safe(obj.to_dict())
    return str(obj)


def _iv(i: Interval | None) -> tuple[float | None, list | None]:
    if i is None:
        return None, None
    return i.value, [i.low, i.high]


def layer_dict(r: LayerResult) -> dict:
    """One layer's numbers for JSON. The verdict reads ``deciding`` (log U and the kernel probes, per model
    role; judged in the report's ``checks``); ``separability_ratio``, ``delta_auroc`` and ``mmd_ratio`` are
    reported beside them and ``lpr``/``delta_lpr``/``separability`` are Mirage's, reported."""
    d_lpr, d_lpr_ci = _iv(r.delta_lpr)
    d_o, d_o_ci = _iv(r.delta_lpr_original)
    d_au, d_au_ci = _iv(r.delta_auroc)
    d_auo, d_auo_ci = _iv(r.delta_auroc_original)
    s_r, s_r_ci = _iv(r.separability_ratio)
    s_o, s_o_ci = _iv(r.separability_ratio_original)
    m_r, m_r_ci = _iv(r.mmd_ratio)
    m_o, m_o_ci = _iv(r.mmd_ratio_original)
    return {
        "lpr": r.lpr, "delta_lpr": d_lpr, "delta_lpr_ci": d_lpr_ci,
        "cka_original": r.cka_original, "cka_retrain": r.cka_retrain, "separability": r.separability,
        "lpr_auroc": r.lpr_auroc, "lpr_retrained": r.lpr_retrained, "lpr_original": r.lpr_original,
        "delta_lpr_original": d_o, "delta_lpr_original_ci": d_o_ci,
        "auroc": r.auroc, "auroc_retrained": r.auroc_retrained, "auroc_original": r.auroc_original,
        "delta_auroc": d_au, "delta_auroc_ci": d_au_ci,
        "delta_auroc_original": d_auo, "delta_auroc_original_ci": d_auo_ci,
        "separability_retrained": r.separability_retrained, "separability_original": r.separability_original,
        "mahalanobis": r.mahalanobis, "mahalanobis_retrained": r.mahalanobis_retrained,
        "mahalanobis_original": r.mahalanobis_original,
        "separability_ratio": s_r, "separability_ratio_ci": s_r_ci,
        "separability_ratio_original": s_o, "separability_ratio_original_ci": s_o_ci,
        "cka_retrain_original": r.cka_retrain_original, "cka_between_retrained": r.cka_between_retrained,
        "auroc_margin": r.auroc_margin, "probed": r.probed, "deciding": r.deciding,
        # adaptive resplitting: how many resplits each reported interval rests on, and its level
        "auroc_splits": r.auroc_splits, "lpr_splits": r.lpr_splits, "resplit_confidence": r.resplit_confidence,
        "mahalanobis_refs": list(r.mahalanobis_refs),
        "mmd": r.mmd, "mmd_original": r.mmd_original, "mmd_refs": list(r.mmd_refs),
        "mmd_ratio": m_r, "mmd_ratio_ci": m_r_ci, "mmd_ratio_original": m_o, "mmd_ratio_original_ci": m_o_ci,
        "mmd_ratio_status": r.mmd_ratio.status if r.mmd_ratio is not None else None,
    }


RULE_NOTE = ("every deciding statistic is measured the same way on the unlearned model, the original and each "
             "reference; flag: beyond the references' prediction bound, Holm within its family at the family's share "
             "of 1 - confidence (suppressed above inside the model, not_forgotten above at the output, overforgotten "
             "below); erased: every testable statistic's kept fraction (u - mean of references) / (original - mean "
             "of references) inside (-kept_margin, kept_margin) by two one-sided t tests at 1 - confidence, on both "
             "audit data, at least one testable at the output and one inside the model, and none told apart (beyond "
             "the references' prediction bound, Holm within its family at the family's share of told_apart_level, "
             "by less than the margin, over the informative statistics; below on a recovery statistic does not "
             "count), nor told apart jointly (the cube root of the mean of its squared standardised deviations over "
             "every informative statistic above the references' own prediction bound, at joint_level: checks.joint), "
             "nor told apart by the MLP probe test (a held-out MLP probe finding the class more easily than in the "
             "references, below their prediction bound at mlp_probe_level: checks.mlp_probe)")


def verdict_line(verdict: str, utility: dict | None) -> str:
    """``verdict`` qualified by the utility axis (``utility``: :func:`unlearnkit.audit.core.utility_loss`'s
    dict, or None): ``"erased · utility −17.7 pts"`` when flagged, else the bare word. ``collapsed`` already
    says the utility is gone."""
    if not utility or not utility.get("flagged") or verdict == "collapsed" or utility.get("loss") is None:
        return verdict
    return f"{verdict} · utility −{utility['loss']:.1f} pts"


@dataclass
class AuditReport:
    """What :func:`unlearnkit.audit.audit` found. ``layers`` holds both audit data choices
    (``{"test": [...], "train": [...]}``); the verdict rests on ``rests_on``."""

    verdict: str
    evidence: list[str]
    rests_on: str
    rests_on_reason: str
    layers: dict[str, list[LayerResult]]
    audit_data: dict[str, dict]
    models: dict[str, dict]
    resurfacing: dict
    idi: dict
    config: AuditConfig
    sample_level: bool
    penultimate: str
    n_forget_needed: int | None = None
    embedding: dict = field(default_factory=dict, repr=False)  # rows of the PCA plot: core.plot_sample
    timing: dict = field(default_factory=dict)
    task: dict = field(default_factory=dict)
    transmitted: dict = field(default_factory=dict)  # VFL models: audit/vfl.py
    checks: tuple = ()  # checks.Check: every deciding statistic, judged (kept fraction, flag, Holm p-value)
    references: list = field(default_factory=list)  # integrity.provenance: each reference's sha256 and source
    references_scope: dict = field(default_factory=dict)  # integrity.scope: drawn by the audit, or given
    references_needed: int | None = None  # inconclusive: references that would decide, if the values stayed
    output_test: Any = None  # metrics.output_test.OutputTest: the output membership test (None: no forget rows)
    utility: dict = field(default_factory=dict)  # core.utility_loss: the utility axis
    joint: Any = None  # joint.Joint: the joint told-apart test over every informative statistic (None: not run)
    mlp_probe: Any = None  # probe_test.ProbeTest: the MLP probe's told-apart test (None: not run)

    @property
    def verdict_line(self) -> str:
        """The verdict with its utility qualifier: ``erased · utility −17.7 pts`` when the retained accuracy
        lost is beyond the budget and the references' spread; the bare word means utility kept."""
        return verdict_line(self.verdict, self.utility)

    def layer(self, name: str, data: str | None = None) -> LayerResult:
        for r in self.layers[data or self.rests_on]:
            if r.layer == name:
                return r
        raise KeyError(name)

    @property
    def layer_names(self) -> list[str]:
        return [r.layer for r in self.layers[self.rests_on]]

    def to_dict(self) -> dict:
        """JSON-safe dict for results.json's ``audit`` key (no NaN: missing numbers are None)."""
        return json_safe({
            "schema": SCHEMA,
            "verdict": self.verdict,
            "verdict_line": self.verdict_line,
            "utility": self.utility,
            "output_test": self.output_test.to_dict() if self.output_test is not None else None,
            "evidence": list(self.evidence),
            "rests_on": self.rests_on,
            "rests_on_reason": self.rests_on_reason,
            "n_forget_needed": self.n_forget_needed,
            "layers": {r.layer: layer_dict(r) for r in self.layers[self.rests_on]},
            "audit_data": {name: {**self.audit_data[name], "layers": {r.layer: layer_dict(r) for r in rs}}
                           for name, rs in self.layers.items()},
            "models": self.models,
            "resurfacing": self.resurfacing,
            "audit_seed": self.config.audit_seed,
            "references_needed": self.references_needed,
            "references": self.references,
            "references_scope": self.references_scope or None,
            "checks": {"items": [c.to_dict() for c in self.checks], "size": len(self.checks),
                       "kept_margin": self.config.kept_margin, "correction": "holm within each family",
                       "alpha": 1.0 - self.config.confidence, "told_apart_level": self.config.told_apart_level,
                       "joint": self.joint.to_dict() if self.joint is not None else None,
                       "mlp_probe": self.mlp_probe.to_dict() if self.mlp_probe is not None else None,
                       "rule": RULE_NOTE},
            "idi": self.idi,
            "cka": ("centered (Kornblith 2019), on standardised units" if self.config.center
                    else "uncentered (Mirage code)"),
            "sample_level": self.sample_level,
            "penultimate_layer": self.penultimate,
            "task": self.task,
            "transmitted": self.transmitted,
            "config": self.config.to_dict(),
            "timing": self.timing,
        })

    def _repr_html_(self) -> str:
        """A notebook's view: the verdict, its evidence and the per-layer numbers of the audit data the
        verdict rests on (:func:`unlearnkit.audit.tables.layer_rows`); every text escaped."""
        d = self.to_dict()
        header, rows = layer_rows(d)
        evidence = "".join(f"<li>{html.escape(e)}</li>" for e in self.evidence)
        return (f"<div><p><b>verdict: {html.escape(self.verdict_line)}</b> (rests on the {html.escape(self.rests_on)} "
                f"data: {html.escape(self.rests_on_reason)})</p><ul>{evidence}</ul>{html_table(header, rows)}</div>")

    def summary(self) -> str:
        lines = [f"verdict: {self.verdict_line} (rests on the {self.rests_on} data: {self.rests_on_reason})"]
        lines += [f"  - {e}" for e in self.evidence]
        return "\n".join(lines)
