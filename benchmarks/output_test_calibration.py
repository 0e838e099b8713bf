"""False flags and power of the output membership test (:mod:`unlearnkit.metrics.output_test`), simulated.

``python benchmarks/output_test_calibration.py [--trials 1000] [--level 0.05]``

Per trial, K retrained references, one more genuine retrain (the null) and the alternatives are drawn from

    φ_m(i) = a_i + b_m + c_m · g_i + e_{m,i},   b_m ~ N(0, s_b²), c_m ~ N(0, s_c²), e ~ N(0, s_e²),

a_i, g_i ~ N(0, 3²), N(0, 1) per forget example: b (an offset) and c (a slope on an example feature) are
random per model, so a model's deviations are correlated across the forget set, as real models' are.
Two regimes: ``model`` (s_b = 1, s_c = 0.5, s_e = 1: model-level effects as large as the per-example
noise) and ``example`` (s_b = s_c = 0.2, s_e = 1). Sizes: n = 150 (digits, one class), 360 (mnist5k, one
class), 500 (random-sample forgetting); K in {2, 3, 5, 8}. The alternatives: the null retrain shifted by
``SHIFTS`` x s_b (the between-model sd; "power" counts decision "above"; the negative shift counts
"below") and ``scramble`` (its per-example noise 3 s_e: retrain's mean, distinguishable per example).
The original passed to the test is the null retrain shifted by 4 s_b (``control`` is how often it is
flagged).

Printed per cell: the test's false-flag rate for the genuine retrain (any aggregate; should be
<= ``--level``) with an exact Clopper-Pearson 95 % interval, the same for each aggregate against its
share (level / 2), and the power. For comparison, two rules the module does not use: T1 with the bound
K/(K-1) times wider (sd(N) · sqrt(1 + 1/K) without the (K - 1)/K factor) and T2 as a leave-one-out
Gaussian prediction bound on log mean z² (the rule the module's docstring explains it replaced).
Seeds are crc32 of the cell's name. numpy only (no model is trained); writes
``benchmarks/results/output_test_calibration.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import zlib
from pathlib import Path

import numpy as np
from audit_calibrate import clopper_pearson
from scipy import stats

from unlearnkit.checkpoints import atomic_write_text
from unlearnkit.metrics.output_test import output_test

OUT = Path(__file__).parent / "results" / "output_test_calibration.json"
SIZES = (150, 360, 500)
KS = (2, 3, 5, 8)
REGIMES = {"model": (1.0, 0.5, 1.0), "example": (0.2, 0.2, 1.0)}   # (s_b, s_c, s_e)
SHIFTS = (0.5, 1.0, 2.0, 3.0, -2.0)                              # in units of s_b
ORIGINAL_SHIFT = 4.0


def draw(rng: np.random.Generator, k: int, n: int, regime: str) -> tuple[np.ndarray, np.ndarray, float]:
    """(references [K, n], one more genuine retrain [n], its example-level noise sd) of one trial."""
    sb, sc, se = REGIMES[regime]
    a, g = rng.normal(0.0, 3.0, n), rng.normal(size=n)
    b, c = rng.normal(0.0, sb, k + 1), rng.normal(0.0, sc, k + 1)
    phi = a + b[:, None] + c[:, None] * g + rng.normal(0.0, se, (k + 1, n))
    return phi[:k], phi[k], se


def loo_log_mean_z2_flag(u: np.ndarray, refs: np.ndarray, sigma: float, alpha: float) -> bool:
    """The rejected T2 rule: A = mean_r log mean z²(u; R \\ {r}) above mean(N) + t · sd(N) · sqrt(1 + 1/K)."""
    k = refs.shape[0]
    loo = (refs.sum(axis=0, keepdims=True) - refs) / (k - 1)
    a = np.log((((u[None] - loo) / sigma) ** 2).mean(axis=1)).mean()
    null = np.log((((refs - loo) / sigma) ** 2).mean(axis=1))
    return bool(a > null.mean() + stats.t.ppf(1 - alpha, k - 1) * null.std(ddof=1) * math.sqrt(1 + 1 / k))


def trial(rng: np.random.Generator, k: int, n: int, regime: str, level: float) -> dict:
    """The decisions of one trial: the null retrain, each alternative, and the comparison rules."""
    refs, null, se = draw(rng, k, n, regime)
    sb = REGIMES[regime][0]
    models = {"null": null, **{f"shift{s:+g}": null + s * sb for s in SHIFTS},
              "scramble": null + rng.normal(0.0, math.sqrt(3.0 ** 2 - 1.0) * se, n)}
    original = null + ORIGINAL_SHIFT * sb
    out = {}
    for name, m in models.items():
        res = output_test(m, refs, original, level)
        out[name] = res.decision
        if name == "null":
            t1, t2 = res.mean_z, res.log_var_ratio
            out["null_t1"], out["null_t2"], out["control"] = t1.flagged, t2.flagged, res.control
            out["references_for_power"] = res.references_for_power
            wider = (t1.upper - t1.lower) / 2.0 * k / (k - 1)
            out["null_t1_wider"] = bool(abs(t1.value - float(np.mean(t1.null))) > wider)
            out["null_t2_loo"] = loo_log_mean_z2_flag(m, refs, res.sigma, level / 2.0) if k > 2 else None
    return out


def rate(count: int, trials: int) -> dict:
    return {"rate": count / trials, "count": count, "trials": trials, "ci95": clopper_pearson(count, trials)}


def _median_or_none(values: list) -> float | None:
    """The median, a None (not within reach) counting as infinite; None if the median is infinite."""
    m = float(np.median([np.inf if v is None else v for v in values]))
    return m if math.isfinite(m) else None


def cell(k: int, n: int, regime: str, trials: int, level: float) -> dict:
    """False-flag rates, power and control of one (regime, n, K) cell."""
    name = f"{regime}/n={n}/K={k}"
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    rows = [trial(rng, k, n, regime, level) for _ in range(trials)]
    count = lambda f: sum(1 for r in rows if f(r))  # noqa: E731
    res = {"cell": name, "regime": regime, "n": n, "K": k,
           "false_flag": rate(count(lambda r: r["null"] in ("above", "below")), trials),
           "false_flag_t1": rate(count(lambda r: r["null_t1"]), trials),
           "false_flag_t2": rate(count(lambda r: r["null_t2"]), trials),
           "false_flag_t1_without_factor": rate(count(lambda r: r["null_t1_wider"]), trials),
           "false_flag_t2_leave_one_out": rate(count(lambda r: r["null_t2_loo"]), trials) if k > 2 else None,
           "control": rate(count(lambda r: r["control"]), trials),
           "references_for_power_median": _median_or_none([r["references_for_power"] for r in rows]),
           "power": {}}
    for s in SHIFTS:
        want = "above" if s > 0 else "below"
        res["power"][f"{s:+g}"] = rate(count(lambda r, s=s, want=want: r[f"shift{s:+g}"] == want), trials)
    res["power"]["scramble"] = rate(count(lambda r: r["scramble"] in ("above", "below")), trials)
    return res


def line(c: dict) -> str:
    ff, t2loo = c["false_flag"], c["false_flag_t2_leave_one_out"]
    pw = " ".join(f"{s}:{v['rate']:.2f}" for s, v in c["power"].items())
    loo = f"{t2loo['rate']:.3f}" if t2loo else "  -  "
    return (f"{c['cell']:<20} flag {ff['rate']:.3f} [{ff['ci95'][0]:.3f},{ff['ci95'][1]:.3f}]  "
            f"T1 {c['false_flag_t1']['rate']:.3f} T2 {c['false_flag_t2']['rate']:.3f} | "
            f"T1 no-factor {c['false_flag_t1_without_factor']['rate']:.3f} T2 LOO {loo} | "
            f"control {c['control']['rate']:.2f} | power {pw}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--level", type=float, default=0.05)
    args = ap.parse_args()
    if args.trials < 1 or not 0 < args.level < 1:
        ap.error("--trials must be >= 1 and --level in (0, 1)")
    cells = []
    for regime in REGIMES:
        for n in SIZES:
            for k in KS:
                cells.append(cell(k, n, regime, args.trials, args.level))
                print(line(cells[-1]), flush=True)
    doc = {"level": args.level, "trials": args.trials, "regimes": {k: dict(zip(("s_b", "s_c", "s_e"), v))
                                                                   for k, v in REGIMES.items()},
           "shifts_in_s_b": list(SHIFTS), "original_shift": ORIGINAL_SHIFT, "cells": cells}
    atomic_write_text(OUT, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
