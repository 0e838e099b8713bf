"""Coverage of the MMD ratio interval (metrics/two_sample.py) at the audit's sizes, and its power against
a mean-matched adversary.

    OPENBLAS_NUM_THREADS=1 python benchmarks/two_sample_coverage.py [--quick] [--trials N] [--refs K] [--jobs J]

Coverage: per case, ``--trials`` simulated audits (400; ``--quick``: 100) of one "unlearned" and ``--refs``
reference feature sets (p = 128) of the same images: every model's features are sqrt(c) s + sqrt(1 − c) e
with s shared by all models (the same images) and e its own, c = 0.8, before each family's transform of the
forget rows. The forget rows of the unlearned model differ from the retained ones by θ_u, the references'
by θ_ref, with θ_u solved so that the population MMD² ratio is 0.5, 1, 2 or 4. Population MMD² means the
statistic's limit: whitened by the population total covariance, bandwidth the population median distance.

* ``gauss``: forget unit 1 shifted by θ, units 2..11 scaled by e^{θ/4} (mean and covariance), the rest
  N(0, 1); population MMD² in closed form (Gaussian integrals; the median distance by quadrature).
* ``relu``: ReLU(pre-activation + 0.5); forget unit 1's pre-activation shifted by θ/2, units 2..11
  scaled by e^{θ/5} and shifted so that their mean after the ReLU is the retained one (mean-matched
  shape changes); population MMD² by quadrature, the median distance by Monte Carlo (400,000 pairs).
* sizes: ``digits`` 131 forget / 1,164 retained rows, ``mnist5k`` 360 / 3,240 (the statistic keeps at
  most 1,500 retained rows).

A case covers when Fieller's 95 % interval of :func:`ratio_interval` holds the population ratio; the table
gives the coverage with its exact (Clopper-Pearson) 95 % interval, the misses below/above, the coverage
the log-normal interval exp(±1.96 se_log) would have had, the empirical s.d. of the log ratio against the
mean ``se_log``, and the references' mean z = value / s.d. Target: 93-97 % in every case.

Power: forget rows whose covariance is scaled by ``--scale`` (1.5) or 4 along 10 random directions,
with the retained mean (mean-matched) or with the references' mean shift, through a random invertible
mixing of the 128 units, against references whose forget rows only differ in mean (Mahalanobis D² of
the mean difference 1 or 4): the D² ratio (metrics/lda.py) and the MMD ratio with its interval, medians
over ``--power-trials``.

Results: benchmarks/results/two_sample_coverage.json (written atomically).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy import optimize, stats

P = 128
CORR = 0.8
SIZES = {"digits": (131, 1164), "mnist5k": (360, 3240)}
RATIOS = (0.5, 1.0, 2.0, 4.0)
OUT = Path(__file__).resolve().parent / "results" / "two_sample_coverage.json"

GH_X, GH_W = np.polynomial.hermite_e.hermegauss(80)
GH_W = GH_W / math.sqrt(2 * math.pi)  # E f(g), g ~ N(0, 1) = Σ w f(x)
CHI_U = (np.arange(400) + 0.5) / 400


# --- population MMD² ---------------------------------------------------------------------------------

class Gauss:
    """Forget rows: unit 0 ~ N(a θ, 1), units 1..q ~ N(0, e^{2bθ}); retained rows and other units N(0, 1).
    Units are independent given the group and the total covariance is diagonal, so the whitened kernel
    factorises over units."""

    name, a, b, q, theta_ref = "gauss", 1.0, 0.25, 10, 1.5

    def _types(self, theta: float, pi: float):
        mu, s2 = self.a * theta, math.exp(2 * self.b * theta)
        t1, tq = 1 + pi * (1 - pi) * mu ** 2, pi * s2 + (1 - pi)
        # pair types: (probability, mean of unit 0's difference, its variance, variance of units 1..q's)
        return [(pi * pi, 0.0, 2 / t1, 2 * s2 / tq), ((1 - pi) ** 2, 0.0, 2 / t1, 2 / tq),
                (2 * pi * (1 - pi), mu / math.sqrt(t1), 2 / t1, (s2 + 1) / tq)]

    def _median(self, types) -> float:
        rest = P - 1 - self.q
        cq = stats.chi2.ppf(CHI_U, self.q)

        def cdf(t: float) -> float:
            tot = 0.0
            for prob, m1, v1, vq in types:
                w1 = (m1 + math.sqrt(v1) * GH_X) ** 2
                arg = np.maximum((t - w1[:, None] - vq * cq[None, :]) / 2, 0)
                tot += prob * float(GH_W @ stats.chi2.cdf(arg, rest).mean(1))
            return tot - 0.5
        return optimize.brentq(cdf, 1e-6, 20.0 * P, xtol=1e-12)

    def mmd2(self, theta: float, pi: float) -> float:
        types = self._types(theta, pi)
        s2 = self._median(types)
        rest = P - 1 - self.q
        e = [(1 + 2 / s2) ** (-rest / 2) * (1 + vq / s2) ** (-self.q / 2) * (1 + v1 / s2) ** -0.5
             * math.exp(-m1 ** 2 / (2 * (s2 + v1))) for _, m1, v1, vq in types]
        return e[0] + e[1] - 2 * e[2]

    def sample(self, base: np.ndarray, nf: int, theta: float) -> np.ndarray:
        x = base.copy()
        x[:nf, 0] += self.a * theta
        x[:nf, 1:1 + self.q] *= math.exp(self.b * theta)
        return x


def _gl(hi: float):
    x, w = np.polynomial.legendre.leggauss(240)
    return hi / 2 * (x + 1), hi / 2 * w


def relu_moments(mu: float, tau: float) -> tuple[float, float]:
    """E X, E X² for X = max(0, N(mu, tau²))."""
    x, w = _gl(max(mu, 0) + 12 * tau)
    dens = stats.norm.pdf(x, mu, tau) * w
    return float(dens @ x), float(dens @ (x * x))


def relu_pair(u: tuple[float, float], v: tuple[float, float], c2: float) -> float:
    """E exp(−(X − X')² / (2 c2)) for independent X = max(0, N(u)), X' = max(0, N(v)) ((mean, sd) pairs)."""
    p0, q0 = stats.norm.cdf(-u[0] / u[1]), stats.norm.cdf(-v[0] / v[1])
    x, wx = _gl(max(u[0], 0) + 12 * u[1])
    y, wy = _gl(max(v[0], 0) + 12 * v[1])
    dx, dy = stats.norm.pdf(x, *u) * wx, stats.norm.pdf(y, *v) * wy

    def f(t):
        return np.exp(-t * t / (2 * c2))
    return float(p0 * q0 + p0 * (dy @ f(y)) + q0 * (dx @ f(x)) + dx @ f(x[:, None] - y[None, :]) @ dy)


class Relu:
    """ReLU(pre + b0); forget rows: unit 0's pre-activation shifted by a θ, units 1..q's scaled by e^{cθ}
    and shifted to keep their post-ReLU mean. Units independent given the group, equal means except unit 0:
    the total covariance is diagonal and the kernel factorises; the median distance by Monte Carlo."""

    name, a, c, q, b0, theta_ref = "relu", 0.5, 0.2, 10, 0.5, 2.0

    def __init__(self, n_mc: int = 400_000, seed: int = 0):
        rng = np.random.default_rng(seed)
        m1, m2 = relu_moments(self.b0, 1.0)
        self.m0, self.v0 = m1, m2 - m1 * m1
        self.plain = np.zeros(n_mc)
        for i in range(0, n_mc, 20_000):
            k = min(20_000, n_mc - i)
            shape = (k, P - 1 - self.q)
            u = np.maximum(rng.standard_normal(shape) + self.b0, 0)
            u -= np.maximum(rng.standard_normal(shape) + self.b0, 0)
            self.plain[i:i + k] = (u * u).sum(1) / self.v0
        self.g = rng.standard_normal((3, 2, n_mc))
        self.h = rng.standard_normal((3, 2, n_mc, self.q)).astype(np.float32)

    def params(self, theta: float):
        tau = math.exp(self.c * theta)
        shift = optimize.brentq(lambda s: s * stats.norm.cdf(s / tau) + tau * stats.norm.pdf(s / tau) - self.m0,
                                -50, 50, xtol=1e-13)
        return (self.b0 + self.a * theta, 1.0), (shift, tau)

    def mmd2(self, theta: float, pi: float) -> float:
        one, many = self.params(theta)
        r = (self.b0, 1.0)
        (a1, a2), (b1, b2), (c1, c2) = relu_moments(*one), relu_moments(*r), relu_moments(*many)
        s1 = pi * a2 + (1 - pi) * b2 - (pi * a1 + (1 - pi) * b1) ** 2
        sq = pi * c2 + (1 - pi) * b2 - (pi * c1 + (1 - pi) * b1) ** 2
        spec = [(pi * pi, one, one, many, many), ((1 - pi) ** 2, r, r, r, r), (2 * pi * (1 - pi), one, r, many, r)]
        vals, wts = [], []
        for j, (prob, u1, u2, v1, v2) in enumerate(spec):
            w = (np.maximum(u1[0] + u1[1] * self.g[j, 0], 0) - np.maximum(u2[0] + u2[1] * self.g[j, 1], 0)) ** 2
            hq = (np.maximum(v1[0] + v1[1] * self.h[j, 0], 0) - np.maximum(v2[0] + v2[1] * self.h[j, 1], 0)) ** 2
            vals.append(w / s1 + hq.sum(1) / sq + self.plain)
            wts.append(np.full(len(w), prob / len(w)))
        allv, wt = np.concatenate(vals), np.concatenate(wts)
        order = np.argsort(allv)
        s2 = float(allv[order][np.searchsorted(np.cumsum(wt[order]), 0.5)])
        plain = relu_pair(r, r, s2 * self.v0) ** (P - 1 - self.q)
        e = [relu_pair(u1, u2, s2 * s1) * relu_pair(v1, v2, s2 * sq) ** self.q * plain for _, u1, u2, v1, v2 in spec]
        return e[0] + e[1] - 2 * e[2]

    def sample(self, base: np.ndarray, nf: int, theta: float) -> np.ndarray:
        one, many = self.params(theta)
        x = base + self.b0
        x[:nf, 0] = base[:nf, 0] + one[0]
        x[:nf, 1:1 + self.q] = many[1] * base[:nf, 1:1 + self.q] + many[0]
        return np.maximum(x, 0)


# --- one case ----------------------------------------------------------------------------------------

def solve_theta(fam, pi: float, ratio: float) -> tuple[float, float, float]:
    """(θ_u, population MMD²_u, population MMD²_ref) with MMD²(θ_u) / MMD²(θ_ref) = ratio."""
    ref = fam.mmd2(fam.theta_ref, pi)
    if ratio == 1.0:
        return fam.theta_ref, ref, ref
    theta = optimize.brentq(lambda t: fam.mmd2(t, pi) / ref - ratio, 0.05, 8.0, xtol=1e-9)
    return theta, fam.mmd2(theta, pi), ref


def run_trials(task: dict) -> dict:
    """Coverage records of ``task['trials']`` audits of one case (one process, one thread)."""
    import torch

    from unlearnkit.metrics.two_sample import MAX_ROWS, mmd_two_sample, ratio_interval
    torch.set_num_threads(1)
    fam = Gauss() if task["family"] == "gauss" else Relu(n_mc=1000)  # sampling needs no Monte Carlo
    nf, nr = SIZES[task["size"]]
    y = np.r_[np.ones(nf, bool), np.zeros(nr, bool)]
    rng = np.random.default_rng(task["seed"])
    rec, t_stat, n_stat = [], 0.0, 0
    for _ in range(task["trials"]):
        shared = rng.standard_normal((nf + nr, P))

        def model(theta, shared=shared):
            base = math.sqrt(CORR) * shared + math.sqrt(1 - CORR) * rng.standard_normal(shared.shape)
            return fam.sample(base, nf, theta)
        t0 = time.perf_counter()
        su = mmd_two_sample(model(task["theta_u"]), y, max_rows=MAX_ROWS)
        refs = [mmd_two_sample(model(fam.theta_ref), y, max_rows=MAX_ROWS) for _ in range(task["refs"])]
        t_stat += time.perf_counter() - t0
        n_stat += 1 + task["refs"]
        r = ratio_interval(su, refs, 0.95)
        z_ref = float(np.mean([s.value / math.sqrt(s.var) for s in refs]))
        rec.append([r.ratio, r.low, r.high, r.se_log, z_ref, float(any(s.saturated for s in [su, *refs]))])
    return {**task, "records": rec, "seconds_per_stat": t_stat / max(n_stat, 1)}


def summarise(res: dict) -> dict:
    rec = np.array(res["records"])
    true = res["true_ratio"]
    ratio, low, high, se = rec[:, 0], rec[:, 1], rec[:, 2], rec[:, 3]
    n = len(rec)
    hits = int(((low <= true) & (true <= high)).sum())
    ci = stats.binomtest(hits, n).proportion_ci(0.95, method="exact")
    fine = (ratio > 0) & np.isfinite(se)
    log_low, log_high = ratio * np.exp(-1.959964 * se), ratio * np.exp(1.959964 * se)
    log_hits = int((fine & (log_low <= true) & (true <= log_high)).sum())
    logr = np.log(ratio[fine])
    return {"family": res["family"], "size": res["size"], "refs": res["refs"], "target_ratio": res["target"],
            "true_ratio": true, "theta_u": res["theta_u"], "theta_ref": res["theta_ref"],
            "population_mmd2_u": res["pop_u"], "population_mmd2_ref": res["pop_ref"], "trials": n,
            "coverage": hits / n, "coverage_ci95": [ci.low, ci.high], "miss_below": int((true < low).sum()),
            "miss_above": int((true > high).sum()), "unbounded": int((~np.isfinite(high)).sum()),
            "saturated": int(rec[:, 5].sum()), "coverage_lognormal": log_hits / n,
            "median_ratio": float(np.median(ratio)), "sd_log_ratio": float(np.std(logr, ddof=1)),
            "mean_se_log": float(np.mean(se[fine])), "mean_z_ref": float(np.mean(rec[:, 4])),
            "seconds_per_stat": res["seconds_per_stat"]}


# --- power against a mean-matched adversary ----------------------------------------------------------

def power(trials: int, scale: float, ref_d2: float, refs: int, matched: bool, seed: int = 123) -> dict:
    """Forget rows whose covariance is x ``scale`` along 10 random directions, with the retained mean
    (``matched``: a mean-matched adversary) or with the references' mean shift (the adversary that matches
    retrain's mean), against references whose forget rows differ only in mean (D² = ``ref_d2``);
    digits-sized, through one random mixing of the units. Returns the medians over ``trials``."""
    import torch

    from unlearnkit.metrics.lda import mahalanobis_separability
    from unlearnkit.metrics.two_sample import mmd_two_sample, ratio_interval
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    nf, nr = SIZES["digits"]
    y = np.r_[np.ones(nf, bool), np.zeros(nr, bool)]
    mix = rng.standard_normal((P, P)) / math.sqrt(P) + np.eye(P)
    dirs = np.linalg.qr(rng.standard_normal((P, 10)))[0]
    shift = rng.standard_normal(P)
    shift *= math.sqrt(ref_d2) / np.linalg.norm(shift)
    d2_ratio, mmd = [], []
    for _ in range(trials):
        shared = rng.standard_normal((nf + nr, P))

        def base(shared=shared):
            return math.sqrt(CORR) * shared + math.sqrt(1 - CORR) * rng.standard_normal(shared.shape)
        xu = base()
        xu[:nf] += ((xu[:nf] @ dirs) * (math.sqrt(scale) - 1)) @ dirs.T + (0.0 if matched else shift)
        xr = [base() for _ in range(refs)]
        for x in xr:
            x[:nf] += shift
        xu, xr = xu @ mix, [x @ mix for x in xr]
        d2u = mahalanobis_separability(torch.from_numpy(xu), torch.from_numpy(y))
        d2r = np.mean([mahalanobis_separability(torch.from_numpy(x), torch.from_numpy(y)) for x in xr])
        r = ratio_interval(mmd_two_sample(xu, y), [mmd_two_sample(x, y) for x in xr], 0.95)
        d2_ratio.append(d2u / d2r)
        mmd.append([r.ratio, r.low, r.high])
    mmd = np.array(mmd)
    return {"adversary": "mean-matched" if matched else "retrain's mean", "scale": scale, "ref_d2": ref_d2,
            "refs": refs, "trials": trials, "median_d2_ratio": float(np.median(d2_ratio)),
            "median_mmd_ratio": float(np.median(mmd[:, 0])),
            "median_mmd_interval": [float(np.median(mmd[:, 1])), float(np.median(mmd[:, 2]))],
            "mmd_excludes_1": float(np.mean((mmd[:, 1] > 1) | (mmd[:, 2] < 1)))}


# --- main ------------------------------------------------------------------------------------------

def build_tasks(args) -> list[dict]:
    from unlearnkit.metrics.two_sample import MAX_ROWS
    tasks, case = [], 0
    for fname in args.families.split(","):
        fam = Gauss() if fname == "gauss" else Relu()
        for size in args.sizes.split(","):
            nf, nr = SIZES[size]
            pi = nf / (nf + min(nr, MAX_ROWS))
            for target in RATIOS:
                theta, pop_u, pop_ref = solve_theta(fam, pi, target)
                common = {"family": fname, "size": size, "target": target, "theta_u": theta,
                          "theta_ref": fam.theta_ref, "pop_u": pop_u, "pop_ref": pop_ref,
                          "true_ratio": pop_u / pop_ref, "refs": args.refs, "case": case}
                chunks = max(1, args.jobs)
                for j in range(chunks):
                    n = args.trials // chunks + (j < args.trials % chunks)
                    tasks.append({**common, "trials": n, "seed": [20260 + case, j]})
                case += 1
    return tasks


def merge(done: list[dict]) -> list[dict]:
    cases: dict[int, dict] = {}
    for res in done:
        c = cases.setdefault(res["case"], {**res, "records": [], "seconds": []})
        c["records"] += res["records"]
        c["seconds"].append(res["seconds_per_stat"])
    for c in cases.values():
        c["seconds_per_stat"] = float(np.mean(c["seconds"]))
    return [summarise(cases[k]) for k in sorted(cases)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 trials per case")
    ap.add_argument("--trials", type=int, default=None, help="trials per case (default 400; --quick 100)")
    ap.add_argument("--refs", type=int, default=1, help="references per audit (default 1)")
    ap.add_argument("--families", default="gauss,relu")
    ap.add_argument("--sizes", default="digits,mnist5k")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes, one thread each (default 1)")
    ap.add_argument("--power-trials", type=int, default=20)
    ap.add_argument("--scale", type=float, default=1.5, help="the adversary's covariance factor (and 4)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    args.trials = args.trials or (100 if args.quick else 400)
    if args.trials < 1 or args.refs < 1 or args.jobs < 1:
        ap.error("--trials, --refs and --jobs must be at least 1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    start = time.perf_counter()
    tasks = build_tasks(args)
    print(f"populations solved in {time.perf_counter() - start:.0f} s; {len(tasks)} tasks", flush=True)
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            done = list(pool.map(run_trials, tasks))
    else:
        done = [run_trials(t) for t in tasks]
    rows = merge(done)
    head = (f"{'family':6} {'size':8} {'ratio':>5} {'true':>6} {'cover':>6} {'exact 95% CI':>13} {'lo/hi':>6} "
            f"{'lognorm':>7} {'sd log':>7} {'se log':>7} {'z ref':>6} {'s/stat':>6}")
    print(f"\nnominal 95 % Fieller interval, {args.trials} trials per case, {args.refs} reference(s), c = {CORR}")
    print(head)
    for r in rows:
        print(f"{r['family']:6} {r['size']:8} {r['target_ratio']:5.1f} {r['true_ratio']:6.3f} {r['coverage']:6.1%} "
              f"[{r['coverage_ci95'][0]:.3f},{r['coverage_ci95'][1]:.3f}] {r['miss_below']:>2}/{r['miss_above']:<3} "
              f"{r['coverage_lognormal']:7.1%} {r['sd_log_ratio']:7.3f} {r['mean_se_log']:7.3f} "
              f"{r['mean_z_ref']:6.1f} {r['seconds_per_stat']:6.2f}")
    settings = [(True, sc, d) for sc in (args.scale, 4.0) for d in (1.0, 4.0)]
    settings += [(False, sc, 4.0) for sc in (args.scale, 4.0)]
    pw = [power(args.power_trials, sc, d, args.refs, matched) for matched, sc, d in settings]
    print(f"\npower vs a mean-matched adversary (digits size, {args.power_trials} trials, {args.refs} reference(s))")
    print(f"{'adversary':14} {'cov x':>5} {'ref D2':>6} {'D2 ratio':>8} {'MMD ratio':>9} {'median 95% CI':>15} "
          f"{'CI excl. 1':>10}")
    for r in pw:
        lo, hi = r["median_mmd_interval"]
        print(f"{r['adversary']:14} {r['scale']:5.1f} {r['ref_d2']:6.1f} {r['median_d2_ratio']:8.3f} "
              f"{r['median_mmd_ratio']:9.2f} "
              f"[{lo:6.2f},{hi:6.2f}] {r['mmd_excludes_1']:10.0%}")
    elapsed = time.perf_counter() - start
    print(f"\nrun time {elapsed:.0f} s")
    from unlearnkit.checkpoints import atomic_write_text
    payload = {"command": "benchmarks/two_sample_coverage.py", "trials": args.trials, "refs": args.refs,
               "corr": CORR, "p": P, "confidence": 0.95, "run_seconds": elapsed, "coverage": rows, "power": pw}
    atomic_write_text(args.out, json.dumps(payload, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
