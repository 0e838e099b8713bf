"""Could any audit with these K references refuse the keepers? The ground truth's own probe, read against them.

    .venv/bin/python benchmarks/oracle_references.py --seeds 0,1,2,3,4,5 --references 5,8,16 \
        --out benchmarks/results/oracle_references_digits.json

A pool keeper (``gt_pool.py``) lies below every one of 48 genuine retrains on the ground truth's probe: the held-out
log loss of an MLP probe of the forgotten class at the penultimate layer, averaged over three probe seeds. The
pool makes that an oracle: a threshold at the keeper's loss refuses none of 48 genuine retrains. An audit has
K references, not 48. Here each seed's references (the retrains an audit of that seed reads: seeds s .. s + K − 1,
as ``told_apart_level.py`` and ``unlearnkit run --seed s --references K`` take them) are read by the very same
probe (``gt_pool.measure``: the same probe seeds as the pool), and for every pool keeper of ``--pool-json`` (by
the probe: ``pool_at_or_below == 0``) and every K it prints

- ``p``: the one-sided Student-t prediction p-value of the keeper's log probe loss below the K references'
  (K − 1 degrees of freedom): the test the audit applies to every statistic, on the statistic that defines a
  keeper, with no multiplicity;
and per K and level (0.05, 0.1, 0.2) the keepers such a test refuses (p below the level) beside the share of the
pool's genuine retrains it refuses against the same references (each seed's): the oracle test's own trade-off.

A keeper with p above the audit's level is one that a test reading the ground truth's own measure does not refuse
at that level with these K references; the audit's statistics, which the attack was trained to match, see it no
better (docs/audit.md, "What five references can see"). Only the probe criterion is read here (the pool's other
criterion, relearning beyond every genuine retrain, marks none of the keepers this was written for).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).resolve().parent
POOLS = [str(HERE / "results" / f"gt_pool_digits{x}.json")
         for x in ("", "_tighter_s012", "_tighter_s345", "_joint", "_marginal", "_block3", "_util", "_centre",
                   "_centre_canon")]


def lower_p(value: float, refs: list[float]) -> float:
    """One-sided Student-t prediction p-value of ``value`` below ``refs`` (all on the log scale)."""
    r = np.asarray(refs, dtype=float)
    k = r.size
    scale = float(r.std(ddof=1)) * math.sqrt(1.0 + 1.0 / k)
    return float(stats.t.cdf((value - r.mean()) / scale, k - 1))


LEVELS = (0.05, 0.1, 0.2)


def rows_for(seed: int, ks: list[int], ref_probes: list[float], pool: list[float], keepers: list[dict]) -> list[dict]:
    """Per K: the pool's genuine retrains' p's against the first K of ``ref_probes`` (``family`` None), then each
    keeper of ``seed``'s p (module docstring); losses read on the log scale."""
    out = []
    for k in ks:
        refs = [math.log(v) for v in ref_probes[:k]]
        out.append({"seed": seed, "k": k, "family": None, "p": [lower_p(math.log(v), refs) for v in pool]})
        out += [{"seed": seed, "k": k, "family": row["family"], "probe": row["probe"],
                 "p": lower_p(math.log(row["probe"]), refs)} for row in keepers]
    return out


def table(rows: list[dict], ks: list[int]) -> list[str]:
    """Per K and level: keepers refused (p below it) and the pool's genuine retrains refused (module docstring)."""
    lines = ["| K | level | pool keepers refused by the ground truth's probe | genuine retrains of the pool refused "
             "| largest keeper p |", "|---|---|---|---|---|"]
    for k in ks:
        kept = [r for r in rows if r["k"] == k and r["family"] is not None]
        genuine = np.concatenate([r["p"] for r in rows if r["k"] == k and r["family"] is None])
        top = max(kept, key=lambda r: r["p"], default=None)
        for level in LEVELS:
            lines.append(f"| {k} | {level:g} | {sum(r['p'] < level for r in kept)}/{len(kept)} | "
                         f"{int((genuine < level).sum())}/{genuine.size} ({100 * (genuine < level).mean():.1f} %) | "
                         + (f"{top['p']:.3f} (seed {top['seed']} {top['family']})" if top else "-") + " |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    ap.add_argument("--references", default="5,8,16")
    ap.add_argument("--pool-json", nargs="+", default=POOLS, help="gt_pool.py outputs (the first one's pool is read)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
        ks = [int(k) for k in a.references.split(",")]
    except ValueError:
        ap.error("--seeds and --references are comma-separated numbers")
    if min(ks) < 3:
        ap.error("--references: at least 3 (a prediction bound needs a spread)")
    pools = []
    for f in a.pool_json:
        try:
            pools.append(json.loads(Path(f).read_text()))
        except (OSError, ValueError) as e:
            ap.error(f"cannot read {f}: {e}")
    first = pools[0]
    probe_seeds = [int(s) for s in first["args"]["probe_seeds"].split(",")]
    if any(p["args"]["probe_seeds"] != first["args"]["probe_seeds"] or p["args"].get("dataset", "digits") != "digits"
           for p in pools):
        ap.error("--pool-json: every pool must be digits, with the same --probe-seeds")
    pool = [g["probe"] for g in first["pool"] if g["probe"] is not None]
    keepers = [r for p in pools for r in p["rows"] if r["pool_at_or_below"] == 0 and r["probe"] is not None]
    sys.path.insert(0, str(HERE))
    import attack_suite as S
    import torch

    from unlearnkit import ForgetSpec, load_dataset, make_split

    torch.set_num_threads(1)
    t0 = time.time()
    split = make_split(load_dataset("digits"), ForgetSpec(classes=(3,)))
    rows, ref_probes, memo = [], {}, {}

    def probe(s: int) -> float:  # retrain s, read as the pool is (each retrain once: the seeds' references overlap)
        if s not in memo:
            memo[s] = float(np.mean([S.gt_probe(S.model_of("retrain", split, s), split, ps) for ps in probe_seeds]))
        return memo[s]

    for seed in seeds:
        ref_probes[seed] = [probe(seed + i) for i in range(max(ks))]
        new = rows_for(seed, ks, ref_probes[seed], pool, [r for r in keepers if r["seed"] == seed])
        rows += new
        for r in new:
            if r["family"] is not None:
                print(f"s{seed} K={r['k']:2d} {r['family']:24s} probe {r['probe']:.4f} p {r['p']:.3f}", flush=True)
    lines = table(rows, ks)
    print("\n".join(lines))
    if a.out:
        from unlearnkit.checkpoints import atomic_write_text

        atomic_write_text(a.out, json.dumps({"args": vars(a), "references": ref_probes, "rows": rows, "table": lines,
                                             "elapsed_s": time.time() - t0}, indent=1) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
