"""Each layer's tolerance for the separability ratio, and where it comes from.

The yardstick of "indistinguishable from retrain" is how much retrains of different seeds differ
from each other. With one reference that spread is unknown, and the tolerance is a constant
(``AuditConfig.separability_margin`` = 2.2x) that was calibrated on the architectures listed in
:data:`CALIBRATED` (``CALIBRATION`` in :mod:`unlearnkit.audit.config`; validated in docs/audit.md).
With K >= 2 references the tolerance is derived from them, per layer:

    tolerance = max(floor, exp(t_{K-1, 1 - a} * s * sqrt(1 + 1/K)))

where s is the sample standard deviation of log U over the K references (U = the unbiased Mahalanobis
separability of the forget set at that layer; the same rule on log MMD² sets the MMD² ratio's
tolerance), ``t`` the Student-t quantile and a = (1 − ``confidence``) · 3/8 / (number of comparisons in
the audit's family) / 2 (the layers' share of the false-flag budget, ``config.BUDGET``; the audit's
tests are two-sided since issue 28). This is a two-sided Gaussian *prediction* bound: a new retrain's
log U minus the mean of K references has variance s²(1 + 1/K), so a genuine retrain's point estimate
falls outside the tolerance at one comparison with probability 2a, and at any comparison of the family
with probability at most 3/8 (1 − ``confidence``) (Bonferroni: it holds however the layers are
correlated); the rest of the 5 % goes to the output membership test and to head relearning and
relearning on canonical copies, which decide with K >= 2 references
(:func:`unlearnkit.audit.resurface.relearn_margin`). A flag also
needs the exceedance to be
significant under the data's bootstrap noise, so the realised rate is lower. The tolerance tightens
when the references agree and widens when they do not; ``separability_floor`` (1.5x) is the
documented floor it never goes below (retrains of other seeds differed by up to 1.47x on
small_cnn, ``CALIBRATION``). The t quantile makes few references expensive on purpose:
with K = 2 its multiplier is ~544, with K = 3 ~29, with K = 5 ~8.2 (16 comparisons: separability and
MMD² at 4 layers of 2 audit data, two-sided).

Deliberate: this is INFERRED (no reference code exists for a references-derived audit tolerance).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from .config import BUDGET, AuditConfig

#: Architectures whose one-reference tolerance (2.2x) was calibrated, and on what.
CALIBRATED = {
    "small_cnn": "small_cnn on digits and mnist5k (audit/config.py CALIBRATION; held-out classes there; "
                 "validation in docs/audit.md)",
}
_SHAPE_KEYS = ("name", "num_classes", "in_channels", "image_size")


def calibrated_for(*models) -> str | None:
    """What the constant tolerance was calibrated on, when every model is a calibrated architecture
    built by :func:`unlearnkit.create_model` with its default width; else None (a user's own
    ``nn.Module``, another architecture, or another width)."""
    found = set()
    for model in models:
        spec = getattr(model, "unlearnkit_spec", None) or {}
        extra = {k: v for k, v in spec.items() if k not in _SHAPE_KEYS}
        if spec.get("name") not in CALIBRATED or extra:
            return None
        found.add(spec["name"])
    return CALIBRATED[found.pop()] if len(found) == 1 else None


@dataclass(frozen=True)
class Tolerance:
    """One layer's separability tolerance (a ratio) and its provenance."""

    value: float
    source: str               # "references" | "calibrated" | "uncalibrated"
    k: int                    # references behind it
    sd_log: float | None = None   # spread of log U over the references (k >= 2)
    t: float | None = None        # the Student-t multiplier used
    level: float | None = None    # per-comparison one-sided level a
    floor: float | None = None
    derived: float | None = None  # exp(t * s * sqrt(1 + 1/k)) before the floor

    def describe(self) -> str:
        if self.source == "references":
            where = (f"raised to the {self.floor:g}x floor from {self.derived:.2f}x" if self.value > self.derived
                     else "above the floor")
            return (f"derived from {self.k} retrained references: spread of log U {self.sd_log:.3f}, "
                    f"t multiplier {self.t:.2f} (level {self.level:.4f} per comparison), {where}")
        if self.source == "undefined":
            return "not defined: a reference's separability is not positive and finite at this layer"
        if self.source == "calibrated":
            return f"constant {self.value:g}x, calibrated on this architecture: {self.calibrated_on}"
        return (f"constant {self.value:g}x from small_cnn's calibration, NOT validated for this architecture "
                f"(one reference: pass 5 or more retrained references to derive it)")

    calibrated_on: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["provenance"] = self.describe()
        return d


def separability_tolerance(log_d2_refs: list[float], n_comparisons: int, two_sided: bool,
                           calibrated_on: str | None, config: AuditConfig) -> Tolerance:
    """The tolerance of one layer's separability ratio (see the module docstring)."""
    k = len(log_d2_refs)
    if not all(math.isfinite(v) for v in log_d2_refs):  # a reference's separability is not defined here
        return Tolerance(math.nan, "undefined", k)
    if k < 2:
        if calibrated_on:
            return Tolerance(config.separability_margin, "calibrated", k, calibrated_on=calibrated_on)
        return Tolerance(config.separability_margin, "uncalibrated", k)
    # the layers' share of the false-flag budget (config.BUDGET), Bonferroni over the family
    level = (1.0 - config.confidence) * BUDGET["layers"] / max(n_comparisons, 1) / (2.0 if two_sided else 1.0)
    sd = float(np.std(np.asarray(log_d2_refs, dtype=float), ddof=1))
    t = float(stats.t.ppf(1.0 - level, k - 1))
    derived = math.exp(min(t * sd * math.sqrt(1.0 + 1.0 / k), 700.0))
    return Tolerance(max(config.separability_floor, derived), "references", k, sd, t, level,
                     config.separability_floor, derived, calibrated_on=calibrated_on or "")


def simulate_false_flags(k: int, n_comparisons: int, rho: float, *, trials: int = 20000, seed: int = 0,
                         confidence: float = 0.95, two_sided: bool = False) -> float:
    """How often the rule above flags a genuine retrain, simulated in the large-data limit (no
    bootstrap noise: a point estimate beyond the tolerance counts as a flag, the worst case).

    Per trial: K references and one new retrain, each with log D² at ``n_comparisons`` comparisons
    drawn from a standard Gaussian with correlation ``rho`` between comparisons (layers and audit data
    of one model move together); the floor is left out (it only widens the tolerance). Returns the
    fraction of trials with a flag at any comparison."""
    rng = np.random.default_rng(seed)
    cov = np.full((n_comparisons, n_comparisons), rho) + (1.0 - rho) * np.eye(n_comparisons)
    draws = rng.multivariate_normal(np.zeros(n_comparisons), cov, size=(trials, k + 1))  # trials x (k+1) x L
    refs, new = draws[:, :k], draws[:, k]
    level = (1.0 - confidence) * BUDGET["layers"] / n_comparisons / (2.0 if two_sided else 1.0)
    tol = stats.t.ppf(1.0 - level, k - 1) * refs.std(axis=1, ddof=1) * math.sqrt(1.0 + 1.0 / k)
    dev = new - refs.mean(axis=1)
    beyond = np.abs(dev) > tol if two_sided else dev > tol
    return float(beyond.any(axis=1).mean())
