"""Do the separability ratio's 95 % intervals cover? ``python benchmarks/audit_coverage.py [--quick]``

Synthetic Gaussian forget / retained groups at the audit's sizes (digits' training split: 131 forget
and 1,164 retained rows; mnist5k's: 360 and 3,240; 128 dimensions, small_cnn's penultimate layer),
where the population separability Δ² of the "unlearned" features is a known multiple (0.5, 1, 2, 4) of
the references' (``--d2`` for the references). The models see the same rows, so their noise is
correlated (``--rho``). Each trial draws new rows and computes, exactly as the audit does
(:func:`unlearnkit.metrics.lda.unbiased_separability` and ``ratio_interval``), the ratio U_u / mean(U_refs) and
its nominal 95 % interval; the benchmark prints the share of intervals that contain the true ratio
(target 93-97 %), with an exact 95 % binomial interval of that share, and how often the upper end
fell below the true ratio (the miss that would certify a model at the tolerance: nominal 2.5 %).
Writes ``benchmarks/results/audit_coverage.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import time
import zlib
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from unlearnkit.checkpoints import atomic_write_text
from unlearnkit.metrics.lda import ratio_interval, unbiased_separability

SIZES = {"digits": (131, 1164, 128), "mnist5k": (360, 3240, 128)}
RATIOS = (0.5, 1.0, 2.0, 4.0)


def _features(rng, base: np.ndarray, is_forget: np.ndarray, d2: float, rho: float) -> np.ndarray:
    """Rows whose noise has correlation ``rho`` with ``base``, forget rows shifted so Δ² = ``d2``."""
    x = rho * base + math.sqrt(1 - rho ** 2) * rng.standard_normal(base.shape)
    x[is_forget, 0] += math.sqrt(d2)
    return x


def coverage(n_f: int, n_r: int, p: int, ratio: float, *, d2: float, refs: int, rho: float, trials: int,
             seed: int = 0) -> dict:
    """Coverage of the nominal 95 % interval of U_u / mean(U_refs) at a true ratio ``ratio``."""
    rng = np.random.default_rng(seed)
    y = np.r_[np.ones(n_f, bool), np.zeros(n_r, bool)]
    hit = below = above = undefined = 0
    for _ in range(trials):
        base = rng.standard_normal((n_f + n_r, p))
        s_refs = [unbiased_separability(_features(rng, base, y, d2, rho), y) for _ in range(refs)]
        s_u = unbiased_separability(_features(rng, base, y, d2 * ratio, rho), y)
        r = ratio_interval(s_u, s_refs, y, 0.95)
        if r.status != "ok":
            undefined += 1
            continue
        hit += r.low <= ratio <= r.high
        below += r.high < ratio
        above += r.low > ratio
    n = trials - undefined
    cover = hit / n if n else math.nan
    lo = 0.0 if hit == 0 else stats.beta.ppf(0.025, hit, n - hit + 1)
    hi = 1.0 if hit == n else stats.beta.ppf(0.975, hit + 1, n - hit)
    return {"ratio": ratio, "trials": trials, "defined": n, "coverage": cover, "coverage_ci": [float(lo), float(hi)],
            "upper_below_truth": below / n if n else math.nan, "lower_above_truth": above / n if n else math.nan}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100 trials a case instead of 400")
    p.add_argument("--trials", type=int, default=None)
    p.add_argument("--d2", type=float, default=4.0, help="the references' population Δ²")
    p.add_argument("--refs", type=int, default=1, help="references per audit (the ratio is over their mean)")
    p.add_argument("--rho", type=float, default=0.5, help="noise correlation between the models")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "audit_coverage.json"))
    a = p.parse_args(argv)
    trials = a.trials or (100 if a.quick else 400)
    torch.set_num_threads(1)  # small matrices: threads only contend
    t0 = time.perf_counter()
    rows = []
    print(f"{'size':8s} {'n_f':>4s} {'n_r':>5s} {'p':>4s} {'ratio':>5s}  coverage [exact 95%]   upper<truth  "
          f"lower>truth")
    for name, (n_f, n_r, dim) in SIZES.items():
        for ratio in RATIOS:
            r = coverage(n_f, n_r, dim, ratio, d2=a.d2, refs=a.refs, rho=a.rho, trials=trials,
                         seed=zlib.crc32(f"{name} {ratio}".encode()))  # reproducible (hash() is salted)
            r.update(size=name, n_forget=n_f, n_retain=n_r, p=dim)
            rows.append(r)
            print(f"{name:8s} {n_f:4d} {n_r:5d} {dim:4d} {ratio:5.1f}  {100 * r['coverage']:5.1f} % "
                  f"[{100 * r['coverage_ci'][0]:4.1f}, {100 * r['coverage_ci'][1]:4.1f}]   "
                  f"{100 * r['upper_below_truth']:5.1f} %      {100 * r['lower_above_truth']:5.1f} %", flush=True)
    out = {"d2_references": a.d2, "references": a.refs, "rho": a.rho, "trials": trials, "rows": rows,
           "seconds": time.perf_counter() - t0}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(a.out, json.dumps(out, indent=1) + "\n")
    print(f"{time.perf_counter() - t0:.0f}s; wrote {a.out}")


if __name__ == "__main__":
    main()
