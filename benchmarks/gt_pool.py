"""Where the attack suite's models sit among many genuine retrains, by the ground truth's own measures (issue 42).

    .venv/bin/python benchmarks/gt_pool.py --dataset digits --pool 48 --seeds 0,1,2,3,4,5 \
        --out benchmarks/results/gt_pool_digits.json

The suite's ground truth (``attack_suite.keeps``) calls a model a keeper when its held-out MLP probe's log loss
is below 0.75 x the smallest of twelve genuine retrains' (seeds 100-111), or when it relearns the class more than
10 points above every one of them. Both lines move with the number of genuine retrains they are drawn from (a
minimum falls, a maximum rises, as the pool grows), and a line drawn from twelve retrains says nothing about
how often a genuine retrain itself lies beyond it. This script trains ``--pool`` genuine retrains (seeds 100 ..
100 + pool - 1; the first twelve are the suite's), reads every model's probe loss averaged over
``--probe-seeds`` (the same probe seeds for every model, so a probe's own seed is not a difference between
models) and its relearning curve, and reports for each attacked model of ``--families`` (built by, and cached
with, ``attack_suite.py``):

- its probe loss and the number of genuine retrains of the pool whose loss is at or below it: the share of
  genuine retrains that any audit reading this probe (with however many references) must refuse to refuse
  this model, its **oracle cost**;
- whether it keeps the class by the suite's rule with the suite's twelve retrains, and with the whole pool.

``--score RUN.json ...`` then reads audits that ``told_apart_level.py`` wrote (the same seeds' models, the same
cache) and counts, per K and told-apart level, the audits `erased` among the **pool's keepers**: the models whose
probe loss is below every genuine retrain of the pool, or that keep the class by the suite's rule with the
pool as yardstick (relearning beyond every one of them); beside them, the genuine retrains' audits `erased`:

    .venv/bin/python benchmarks/gt_pool.py --score a.json b.json --pool-json benchmarks/results/gt_pool_digits.json

Nothing here is tuned: the probe, the relearning and the 0.75 / 10-point lines are the suite's.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FAMILIES = ("hardened", "hardened_keep3", "hardened_keep10", "hardened_indist", "hardened_indist_keep3",
            "hardened_tight", "hardened_tight_keep3")


def suite():
    """``benchmarks/attack_suite.py``, imported as ``told_apart_level.py`` imports it (benchmarks is not a
    package)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import attack_suite

    return attack_suite


def read_json(path: str) -> dict:
    """An earlier run's JSON, or one ``error:`` line (exit 2) when it cannot be read."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        print(f"error: cannot read {path}: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def measure(S, model, split, probe_seeds: list[int], layer: str = "penultimate") -> dict:
    """The ground truth's measures of ``model``: probe loss (at ``layer``) per probe seed and their mean,
    relearning curve."""
    per = [S.gt_probe(model, split, s, layer) for s in probe_seeds]
    ok = [p for p in per if p is not None]
    return {"probe_per_seed": per, "probe": float(np.mean(ok)) if len(ok) == len(per) else None,
            "relearn": S.gt_relearn(model, split)}


def placement(gt: dict, pool: list[dict], yardstick: list[dict], S) -> dict:
    """Where one model sits: genuine retrains of the pool at or below its probe loss, and the suite's keeper
    rule with the twelve-retrain yardstick and with the whole pool."""
    losses = np.array([g["probe"] for g in pool if g["probe"] is not None])
    below = int((losses <= gt["probe"]).sum()) if gt["probe"] is not None else None
    keep12, why12 = S.keeps(gt, yardstick, 10.0, 0.75)
    keep_all, why_all = S.keeps(gt, pool, 10.0, 0.75)
    z = None
    if gt["probe"] is not None:
        logs = np.log(losses)
        z = float((np.log(gt["probe"]) - logs.mean()) / logs.std(ddof=1))
    return {"pool_at_or_below": below, "pool_n": int(losses.size), "z_log_probe": z,
            "keeps_12": keep12, "why_12": why12, "keeps_pool": keep_all, "why_pool": why_all}


def exact(k: int, n: int) -> str:
    """``k/n [lo, hi %]`` with the suite's exact (Clopper-Pearson) 95 % bounds."""
    lo, hi = suite().sibling("audit_calibrate").clopper_pearson(k, n)
    return f"{k}/{n} [{100 * lo:.1f}, {100 * hi:.1f} %]"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="digits", choices=("digits", "mnist5k"))
    p.add_argument("--pool", type=int, default=48, help="genuine retrains 100 .. 100 + pool - 1 (at least 12)")
    p.add_argument("--seeds", default="0,1,2,3,4,5", help="the suite's seeds whose attacked models are placed")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--probe-seeds", default="11,22,33")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--layer", default="penultimate", help="where the ground truth's MLP probe reads (the suite's: "
                   "penultimate; block3 for hardened_block3, which keeps the class there)")
    p.add_argument("--out", help="where the pool's JSON goes (required unless --score)")
    p.add_argument("--score", nargs="+", metavar="JSON", help="told_apart_level.py runs to score (module docstring)")
    p.add_argument("--pool-json", nargs="+", help="this script's earlier outputs: with --score, the placements "
                                                  "scored (their rows joined); otherwise one, whose genuine retrains' "
                                                  "measures are reused")
    a = p.parse_args(argv)
    if a.score:
        if not a.pool_json:
            print("error: --score needs --pool-json", file=sys.stderr)
            return 2
        pools = [read_json(f) for f in a.pool_json]
        print("\n".join(score({"rows": [r for pool in pools for r in pool["rows"]]}, [read_json(f) for f in a.score])))
        return 0
    if not a.out:
        print("error: --out is required", file=sys.stderr)
        return 2
    S = suite()
    families = [f for f in a.families.split(",") if f]
    unknown = [f for f in families if f not in S.FAMILIES]
    if unknown or a.pool < 12:
        print(f"error: unknown families {unknown} or --pool {a.pool} below the suite's 12", file=sys.stderr)
        return 2
    from unlearnkit.models.zoo import small_cnn

    layers = list(small_cnn(10).unlearnkit_taps)  # the suite's model (attack_suite.MODEL)
    if a.layer not in layers:
        print(f"error: --layer '{a.layer}' is not one of small_cnn's audit layers {layers}", file=sys.stderr)
        return 2
    import torch

    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.checkpoints import atomic_write_text
    from unlearnkit.training import versions

    torch.set_num_threads(a.threads)
    probe_seeds = [int(s) for s in a.probe_seeds.split(",")]
    split = make_split(load_dataset(a.dataset), ForgetSpec(classes=(3,)))
    t0 = time.perf_counter()
    pool = []
    if a.pool_json:  # the genuine retrains' measures from an earlier run (the same probe seeds)
        earlier = read_json(a.pool_json[0])
        if len(a.pool_json) > 1 or earlier["args"]["probe_seeds"] != a.probe_seeds or len(earlier["pool"]) != a.pool \
                or earlier["args"].get("layer", "penultimate") != a.layer:
            print(f"error: one --pool-json without --score; {a.pool_json[0]} was measured with probe seeds "
                  f"{earlier['args']['probe_seeds']} and a pool of {len(earlier['pool'])} at "
                  f"{earlier['args'].get('layer', 'penultimate')}, not {a.probe_seeds} and {a.pool} at {a.layer}",
                  file=sys.stderr)
            return 2
        pool = earlier["pool"]
    for s in range(100 + len(pool), 100 + a.pool):
        pool.append({"seed": s, **measure(S, S.model_of("retrain", split, s), split, probe_seeds, a.layer)})
        print(f"retrain{s}: probe {pool[-1]['probe']:.4f} relearn {pool[-1]['relearn']}", flush=True)
    yardstick = pool[:12]
    rows = []
    for seed in [int(s) for s in a.seeds.split(",")]:
        original = S.model_of("original", split, seed)
        attacker = S.model_of("retrain", split, 1000 + seed)
        orig = measure(S, original, split, probe_seeds, a.layer)
        for family in families:
            m, _ = S.cached_attack(family, original, attacker, split, seed, Path(S.DEFAULT_CACHE))
            gt = measure(S, m, split, probe_seeds, a.layer)
            row = {"seed": seed, "family": family, **gt, **placement(gt, pool, yardstick, S),
                   "kept_share": S.kept_share(gt["probe"], orig["probe"], pool)}
            rows.append(row)
            print(f"s{seed} {family:22s} probe {gt['probe']} (z {row['z_log_probe']}) genuine at or below "
                  f"{row['pool_at_or_below']}/{row['pool_n']} keeps: 12 {row['keeps_12']!s:5s} pool "
                  f"{row['keeps_pool']!s:5s} kept share {row['kept_share']}", flush=True)
    lines = summary(rows, pool)
    print("\n".join(lines))
    payload = {"args": vars(a), "pool": pool, "rows": rows, "summary": lines,
               "elapsed_s": time.perf_counter() - t0, "versions": versions()}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(a.out, json.dumps(payload, indent=1, default=str) + "\n")
    print(f"wrote {a.out} ({time.perf_counter() - t0:.0f} s)")
    return 0


def summary(rows: list[dict], pool: list[dict]) -> list[str]:
    """The pool's probe range, and per keeper (by the twelve-retrain rule) its oracle cost."""
    losses = sorted(g["probe"] for g in pool if g["probe"] is not None)
    out = [f"genuine pool: {len(losses)} retrains, probe log loss {losses[0]:.4f}-{losses[-1]:.4f} "
           f"(the suite's twelve: min {min(g['probe'] for g in pool[:12]):.4f})",
           "| seed | family | probe loss | genuine at or below it (oracle cost) | keeper (12) | keeper (pool) |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        if r["probe"] is None:  # non-finite features: no probe, so no place in the pool
            out.append(f"| {r['seed']} | {r['family']} | - | - | {r['keeps_12']} | {r['keeps_pool']} |")
        elif r["keeps_12"] or r["keeps_pool"]:
            out.append(f"| {r['seed']} | {r['family']} | {r['probe']:.4f} | {exact(r['pool_at_or_below'], r['pool_n'])}"
                       f" | {r['keeps_12']} | {r['keeps_pool']} |")
    return out


def pool_keeper(row: dict) -> bool:
    """Below every genuine retrain of the pool on the probe, or a keeper by the suite's rule against the pool."""
    return row["pool_at_or_below"] == 0 or bool(row["keeps_pool"])  # None (no probe) is not 0


def score(pool: dict, runs: list[dict]) -> list[str]:
    """Per K and level: audits `erased` among the pool's keepers (with the audits that let one through at the
    default level) and among genuine retrains, over the rows of ``runs`` (``told_apart_level.py`` outputs)."""
    keeper = {(r["seed"], r["family"]): pool_keeper(r) for r in pool["rows"]}
    counts: dict = {}
    through = []
    for run in runs:
        for r in run["rows"]:
            genuine = r["model"].startswith("retrain")
            key = (r["seed"], r["model"])
            if not genuine and key not in keeper:
                raise SystemExit(f"error: seed {r['seed']} {r['model']} is not in the pool's JSON")
            if not genuine and not keeper[key]:
                continue
            for level, verdict in r["verdict_at"].items():
                c = counts.setdefault((r["k"], float(level), genuine), [0, 0])
                c[0] += verdict == "erased"
                c[1] += 1
                if not genuine and verdict == "erased" and float(level) == 0.2:
                    through.append(f"seed {r['seed']} K = {r['k']} {r['model']} (audit seed {r['audit_seed']})")
    out = ["| K | level | pool keepers' audits `erased` | genuine retrains' audits `erased` |", "|---|---|---|---|"]
    for k, level in sorted({(k, lv) for k, lv, _ in counts}):
        kk, gg = counts.get((k, level, False), [0, 0]), counts.get((k, level, True), [0, 0])
        out.append(f"| {k} | {level:g} | {exact(*kk) if kk[1] else '-'} | {exact(*gg) if gg[1] else '-'} |")
    return out + ["pool keepers `erased` at 0.2: " + ("; ".join(through) or "none")]


if __name__ == "__main__":
    sys.exit(main())
