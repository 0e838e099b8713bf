"""How many references would an MLP probe need to tell the attack suite's winners from genuine retrains? (issue 42)

    .venv/bin/python benchmarks/probe_references.py --seeds 0,1,2,3,4,5 \
        --out benchmarks/results/probe_references_digits.json

The attack suite's ``hardened`` family (``hardened``, ``hardened_keep3``, ``hardened_keep10``) keeps the forgotten
class where only an MLP probe finds it, and at K = 5 and 8 the audit certifies some of them (docs/audit.md). This
asks whether *any* rule reading that probe could refuse them at a given number of references K, and at what cost
to genuine retrains: per seed s (digits, class 3, small_cnn, every model from the project's caches), the held-out
log loss ℓ of ``mlp_probe.probe`` (the ground truth's probe: scikit-learn MLP, 5 folds, penultimate layer, train
forget vs retained rows; seeded by ``--probe-seed``, not the ground truth's seed), oriented −log ℓ, on the
original, retrains of seeds s .. s + 31 (the references: the first K), ``--genuine`` genuine held-out retrains
(seeds 5000 + 10 s ..: none is a reference) and the three attacked models. For K in ``--ks``, each model's flag
by the references' one-sided Gaussian prediction bound r̄ + t(K − 1, 1 − α)·s·√(1 + 1/K) at α = 5 % (one
pre-registered check, no multiplicity: the most any single check of the audit could do) and α = 1 % (a family's
share), and its kept fraction (u − r̄) / (o − r̄).

It prints, per K, the flag rate of the attacked models that keep the class by the ground truth
(``attack_suite.keeps``, recomputed against this run's genuine retrains) and of the genuine retrains, with exact
95 % bounds. It is a measurement, not a check the audit runs. Writes ``--out`` (JSON, atomically, after every
seed).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
FAMILIES = ("hardened", "hardened_keep3", "hardened_keep10")


def flag(u: float, original: float, refs: list[float], alpha: float) -> bool:
    """u above the references' one-sided Gaussian prediction bound at level ``alpha`` (the audit's rule,
    :func:`unlearnkit.metrics.equivalence.judge`, one check, no Holm step)."""
    from unlearnkit.metrics.equivalence import judge

    return judge(u, original, refs, margin=0.5, sides="upper", flag_level=alpha).flag == "above"


def seed_rows(s: int, a, split, S, log=print) -> dict:
    """Every model's probe value and ground truth for seed ``s``."""
    penultimate, probe = S.sibling("attack_mean_matched").penultimate, S.sibling("mlp_probe").probe

    def stat(m) -> float:
        return -math.log(probe(*penultimate(m, split), a.probe_seed)[0])

    original = S.model_of("original", split, s)
    attacker = S.model_of("retrain", split, 1000 + s)
    out = {"seed": s, "original": stat(original),
           "references": [stat(S.model_of("retrain", split, s + i)) for i in range(max(a.ks))],
           "genuine": [], "attacked": {}}
    log(f"s{s}: original and {max(a.ks)} references probed", flush=True)
    gt_genuine = []
    for j in range(a.genuine):
        m = S.model_of("retrain", split, 5000 + 10 * s + j)
        gt = {"relearn": S.gt_relearn(m, split), "probe": S.gt_probe(m, split, 5000 + 10 * s + j)}
        gt_genuine.append(gt)
        out["genuine"].append({"seed": 5000 + 10 * s + j, "value": stat(m), "ground_truth": gt})
    for family in FAMILIES:
        m = S.cached_attack(family, original, attacker, split, s, Path(a.cache))[0]
        gt = {"relearn": S.gt_relearn(m, split), "probe": S.gt_probe(m, split, s)}
        keeps, why = S.keeps(gt, gt_genuine, a.gt_margin, a.gt_probe)
        out["attacked"][family] = {"value": stat(m), "ground_truth": gt, "keeps_class": keeps, "keeps_why": why}
    return out


def table(results: list[dict], ks: list[int], S) -> list[str]:
    """Per K and α, the flag rate of the keepers and of the genuine retrains (exact 95 % bounds)."""
    bounds = S.sibling("audit_calibrate").clopper_pearson

    def cp(k: int, n: int) -> str:
        lo, hi = bounds(k, n) if n else (math.nan, math.nan)
        return f"[{100 * lo:.0f}, {100 * hi:.0f} %]"

    lines = ["| K | α | keepers flagged | genuine retrains flagged | keepers' kept fraction (median) |",
             "|---|---|---|---|---|"]
    for k in ks:
        for alpha in (0.05, 0.01):
            kf = kn = gf = gn = 0
            kept = []
            for r in results:
                refs = r["references"][:k]
                centre = float(np.mean(refs))
                for g in r["genuine"]:
                    gn += 1
                    gf += flag(g["value"], r["original"], refs, alpha)
                for v in r["attacked"].values():
                    if v["keeps_class"]:
                        kn += 1
                        kf += flag(v["value"], r["original"], refs, alpha)
                        kept.append((v["value"] - centre) / (r["original"] - centre))
            lines.append(f"| {k} | {alpha:g} | {kf}/{kn} {cp(kf, kn)} | {gf}/{gn} {cp(gf, gn)} | "
                         f"{np.median(kept):+.2f} |" if kept else f"| {k} | {alpha:g} | 0/0 | {gf}/{gn} | - |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--ks", default="5,8,16,32")
    p.add_argument("--genuine", type=int, default=8)
    p.add_argument("--probe-seed", type=int, default=77)
    p.add_argument("--gt-margin", type=float, default=10.0)
    p.add_argument("--gt-probe", type=float, default=0.75)
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "unlearnkit" / "attacks"))
    p.add_argument("--out", default=str(HERE / "results" / "probe_references.json"))
    a = p.parse_args(argv)
    a.ks = sorted(int(k) for k in a.ks.split(","))
    if a.ks[0] < 3 or a.genuine < 1:
        p.error("--ks must be >= 3 and --genuine >= 1")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", module="sklearn")
    sys.path.insert(0, str(HERE))
    import attack_suite as S

    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.checkpoints import atomic_write_text

    split = make_split(load_dataset("digits"), ForgetSpec(classes=(3,)))
    results, t0 = [], time.perf_counter()
    for s in map(int, a.seeds.split(",")):
        results.append(seed_rows(s, a, split, S))
        lines = table(results, a.ks, S)
        print("\n".join(lines), flush=True)
        atomic_write_text(a.out, json.dumps({"args": vars(a), "seeds": results, "table": lines,
                                             "elapsed_s": time.perf_counter() - t0,
                                             "torch": torch.__version__}, indent=1) + "\n")
    print(f"wrote {a.out} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
