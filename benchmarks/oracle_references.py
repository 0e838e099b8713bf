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

``--probe-seeds`` other than the pool's re-reads every model (the references, the pool's genuine retrains, every
attacked model the pools place) with those probe seeds, so that the keepers (still defined by the pool's probe seeds)
are read by a probe that did not define them; ``--audits RUN...`` (``told_apart_level.py --measures`` outputs of
these seeds) then judges each audit as if the audit also read this probe as one more check: `erased` by the default
rule (``combined_rule.joint_p``) and the probe's p at or above a level (0.05, 0.1, 0.2), per K, for keepers, other
attacked models and genuine retrains (those the pool holds): what reading a probe this strong in the audit would
stop and cost. ``--probe batched`` reads the same probe with its fits trained together
(``mlp_probe.probe_batched``: 2.4× cheaper on digits, 3.7× on mnist5k, ``mlp_probe_cost.py``) and re-reads every
model with it; the keepers stay the pool's (its scikit-learn probe, its probe seeds).

A keeper with p above the audit's level is one that a test reading the ground truth's own measure does not refuse
at that level with these K references (docs/audit.md, "What five references can see", sets this beside what the
audit's own statistics refuse). The per-keeper rows read only the probe criterion: the pool's five keepers by
relearning alone (seed 3's, relearning 11-17 % in 20 steps) are not among the 52; ``--audits`` counts every pool
keeper, as ``combined_rule.py`` does.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from unlearnkit.audit.joint import beyond_references

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import combined_rule  # noqa: E402  (a sibling benchmark: the pools' list, the rule judged offline)


def lower_p(value: float, refs: list[float]) -> float:
    """One-sided Student-t prediction p-value of ``value`` below ``refs`` (all on the log scale): the audit's own
    (:func:`unlearnkit.audit.joint.beyond_references`), on the values negated."""
    return beyond_references(-np.asarray([value, *refs], dtype=float))


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


def with_audits(runs: list[str], pools: list[str], probes: dict, ref_probes: dict, ks: list[int]) -> list[str]:
    """The table of ``--audits`` (module docstring): keepers by ``pools`` (``gt_pool.py`` outputs). ``probes``: model
    key ("retrain<s>" or "<seed>/<family>") -> probe loss; ``ref_probes``: seed -> the references' losses."""
    counts: dict = {}
    for row, kind in combined_rule.kinds(runs, pools):
        key = row["model"] if kind == "genuine" else f"{row['seed']}/{row['model']}"
        if row["k"] not in ks or key not in probes or row["seed"] not in ref_probes:
            continue
        p = lower_p(math.log(probes[key]), [math.log(v) for v in ref_probes[row["seed"]][:row["k"]]])
        jp = combined_rule.joint_p(row)
        for level in (None, *LEVELS):
            c = counts.setdefault((row["k"], level, kind), [0, 0])
            c[0] += jp is not None and jp >= 0.05 and (level is None or p >= level)
            c[1] += 1
    lines = ["| K | the probe's level | pool keepers' audits `erased` | other attacked models' | genuine retrains' |",
             "|---|---|---|---|---|"]
    for k in ks:
        for level in (None, *LEVELS):
            cells = [combined_rule.exact(*counts[(k, level, kind)]) if (k, level, kind) in counts else "-"
                     for kind in ("keeper", "other", "genuine")]
            if any(c != "-" for c in cells):
                lines.append(f"| {k} | {'(not read: the default)' if level is None else level} | "
                             + " | ".join(cells) + " |")
    return lines


def _parse(argv):
    """(args, seeds, ks, pools, probe seeds, whether they are not the pool's), or one ``error:`` line (exit 2)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2,3,4,5")
    ap.add_argument("--references", default="5,8,16")
    ap.add_argument("--pool-json", nargs="+", default=combined_rule.POOLS,
                    help="gt_pool.py outputs (the first one's pool is read)")
    ap.add_argument("--probe-seeds", default=None, help="comma-separated; default: the pool's (module docstring)")
    ap.add_argument("--audits", nargs="+", default=None, metavar="RUN", help="told_apart_level.py --measures outputs")
    ap.add_argument("--probe", default="sklearn", choices=("sklearn", "batched"),
                    help="batched: mlp_probe.probe_batched, the same probe's fits trained together (every model "
                         "re-read; the keepers stay the pool's)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
        ks = [int(k) for k in a.references.split(",")]
        probe_seeds = [int(s) for s in a.probe_seeds.split(",")] if a.probe_seeds else None
    except ValueError:
        ap.error("--seeds, --references and --probe-seeds are comma-separated numbers")
    if min(ks) < 3:
        ap.error("--references: at least 3 (a prediction bound needs a spread)")
    pools = []
    for f in a.pool_json:
        try:
            pools.append(json.loads(Path(f).read_text()))
        except (OSError, ValueError) as e:
            ap.error(f"cannot read {f}: {e}")
    theirs = pools[0]["args"]["probe_seeds"]
    if any(p["args"]["probe_seeds"] != theirs or p["args"].get("dataset", "digits") != "digits" for p in pools):
        ap.error("--pool-json: every pool must be digits, with the same --probe-seeds")
    pool_seeds = [int(s) for s in theirs.split(",")]
    return a, seeds, ks, pools, probe_seeds or pool_seeds, probe_seeds not in (None, pool_seeds)


def _probes(S, split, pools: list[dict], probe_seeds: list[int], fresh: bool, probe: str = "sklearn"):
    """(model key -> probe loss for the pool's genuine retrains and every attacked model the pools place, read again
    with ``probe_seeds`` when ``fresh`` (``probe`` "batched": always, by ``mlp_probe.probe_batched``); a function
    reading retrain s, each once)."""
    memo: dict = {}
    fresh = fresh or probe == "batched"

    def read(model) -> float:
        if probe == "batched":
            x, y = S.sibling("attack_mean_matched").penultimate(model, split)
            return float(np.mean(S.sibling("mlp_probe").probe_batched(x, y, probe_seeds)))
        return float(np.mean([S.gt_probe(model, split, ps) for ps in probe_seeds]))

    def retrain(s: int) -> float:  # the seeds' references overlap: each retrain read once
        if s not in memo:
            memo[s] = read(S.model_of("retrain", split, s))
        return memo[s]

    probes = {f"retrain{g['seed']}": g["probe"] for g in pools[0]["pool"] if g["probe"] is not None}
    probes.update({f"{r['seed']}/{r['family']}": r["probe"] for p in pools for r in p["rows"]
                   if r["probe"] is not None})
    for key in list(probes) if fresh else []:
        if key.startswith("retrain"):
            probes[key] = retrain(int(key[7:]))
        else:
            seed, family = int(key.split("/")[0]), key.split("/")[1]
            m, _ = S.cached_attack(family, S.model_of("original", split, seed),
                                   S.model_of("retrain", split, 1000 + seed), split, seed, Path(S.DEFAULT_CACHE))
            probes[key] = read(m)
        print(f"{key}: {probes[key]:.4f}", flush=True)
    return probes, retrain


def main(argv=None) -> int:
    a, seeds, ks, pools, probe_seeds, fresh = _parse(argv)
    keepers = [r for p in pools for r in p["rows"] if r["pool_at_or_below"] == 0 and r["probe"] is not None]
    import attack_suite as S
    import torch

    from unlearnkit import ForgetSpec, load_dataset, make_split

    torch.set_num_threads(1)
    t0 = time.time()
    split = make_split(load_dataset("digits"), ForgetSpec(classes=(3,)))
    probes, retrain = _probes(S, split, pools, probe_seeds, fresh, a.probe)
    pool = [v for key, v in probes.items() if key.startswith("retrain")]
    rows, ref_probes = [], {}
    for seed in seeds:
        ref_probes[seed] = [retrain(seed + i) for i in range(max(ks))]
        mine = [dict(r, probe=probes[f"{r['seed']}/{r['family']}"]) for r in keepers if r["seed"] == seed]
        new = rows_for(seed, ks, ref_probes[seed], pool, mine)
        rows += new
        for r in new:
            if r["family"] is not None:
                print(f"s{seed} K={r['k']:2d} {r['family']:24s} probe {r['probe']:.4f} p {r['p']:.3f}", flush=True)
    lines = table(rows, ks)
    audits = with_audits(a.audits, a.pool_json, probes, ref_probes, ks) if a.audits else None
    print("\n".join(lines + (audits or [])))
    if a.out:
        from unlearnkit.checkpoints import atomic_write_text

        atomic_write_text(a.out, json.dumps({"args": vars(a), "references": ref_probes, "rows": rows, "table": lines,
                                             "probes": probes, "audits": audits, "elapsed_s": time.time() - t0},
                                            indent=1) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
