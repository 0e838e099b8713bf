"""What the ground truth's MLP probe costs, and whether training its fits together keeps its numbers.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mlp_probe_cost.py --retrains 12 \
        --out benchmarks/results/mlp_probe_cost.json

The attack suite's ground truth reads an MLP probe of the forgotten class at the penultimate layer
(``mlp_probe.probe``: scikit-learn, 5 folds, averaged over three probe seeds). docs/audit.md ("What five
references can see") measured that the audit, if it read this probe too, would refuse every keeper of the digits
captures at K = 5, but that it costs 10.5 s a model on digits and 33 s on mnist5k: 4 minutes more on a 20 s mnist5k
audit whose goal is 3× its forward passes. Here the same probe with its 15 fits trained together
(``mlp_probe.probe_batched``) is set beside it, model by model, on one thread of the idle machine, after a
warm-up:

- digits: the cached original (seed 0), genuine retrains 100 .. 100 + ``--retrains`` − 1, and the keepers
  ``--keepers`` (``seed/family`` of the attack cache: by default the two hardest of ``oracle_references_digits.json``
  and the seed-1 ``hardened_centre_canon`` keeper that five references certify);
- mnist5k: ``--mnist5k`` genuine retrains (seeds 0 ..), timing and agreement only.

It prints per model both mean log losses and both times, then the Pearson correlation of the log losses, where each
keeper ranks among the genuine retrains under each probe, and the time ratio (scikit-learn / batched). The probe
seeds are the pool's (11, 22, 33). Nothing here decides a verdict.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def measure(S, model, split, seeds: list[int]) -> dict:
    """Both probes' mean held-out log loss on ``model``'s penultimate features, and their wall times."""
    x, y = S.sibling("attack_mean_matched").penultimate(model, split)
    mlp = S.sibling("mlp_probe")
    sk, t_sk = timed(lambda: [mlp.probe(x, y, s)[0] for s in seeds])
    bt, t_bt = timed(mlp.probe_batched, x, y, seeds)
    return {"sklearn": float(np.mean(sk)), "batched": float(np.mean(bt)), "sklearn_per_seed": sk,
            "batched_per_seed": bt, "sklearn_s": t_sk, "batched_s": t_bt, "rows": int(len(y))}


def summary(rows: dict) -> list[str]:
    """Agreement of the two probes and the keepers' ranks (module docstring)."""
    genuine = {k: v for k, v in rows.items() if k.startswith("digits/retrain")}
    lines = []
    both = [v for k, v in rows.items() if k.startswith("digits/")]
    a = np.log([v["sklearn"] for v in both])
    b = np.log([v["batched"] for v in both])
    lines.append(f"digits: Pearson r of the log losses over {len(both)} models: {np.corrcoef(a, b)[0, 1]:.3f}")
    for k, v in rows.items():
        if k.startswith("digits/") and "retrain" not in k and "original" not in k:
            ranks = [sum(g[p] <= v[p] for g in genuine.values()) for p in ("sklearn", "batched")]
            lines.append(f"{k}: genuine retrains at or below it: scikit-learn {ranks[0]}/{len(genuine)}, "
                         f"batched {ranks[1]}/{len(genuine)}")
    for ds in ("digits", "mnist5k"):
        mine = [v for k, v in rows.items() if k.startswith(ds + "/")]
        if mine:
            sk, bt = sum(v["sklearn_s"] for v in mine), sum(v["batched_s"] for v in mine)
            lines.append(f"{ds}: {len(mine)} models, scikit-learn {sk / len(mine):.2f} s a model, batched "
                         f"{bt / len(mine):.2f} s: {sk / bt:.1f}x")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--retrains", type=int, default=12)
    ap.add_argument("--keepers", default="1/hardened_centre_canon,1/hardened_centre_keep3,2/hardened_tight_keep3")
    ap.add_argument("--mnist5k", type=int, default=2, help="mnist5k retrains timed (0: none)")
    ap.add_argument("--probe-seeds", default="11,22,33")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if a.retrains < 3 or a.mnist5k < 0:
        ap.error("--retrains: at least 3; --mnist5k: 0 or more")
    try:
        seeds = [int(s) for s in a.probe_seeds.split(",")]
        keepers = [(int(k.split("/")[0]), k.split("/")[1]) for k in filter(None, a.keepers.split(","))]
    except (ValueError, IndexError):
        ap.error("--probe-seeds: comma-separated numbers; --keepers: comma-separated seed/family")
    import attack_suite as S
    import torch

    unknown = [family for _, family in keepers if family not in S.FAMILIES]
    if unknown:
        ap.error(f"--keepers: unknown families {unknown}")

    from unlearnkit import ForgetSpec, load_dataset, make_split

    torch.set_num_threads(1)
    rows: dict = {}
    split = make_split(load_dataset("digits"), ForgetSpec(classes=(3,)))
    models = {"digits/original0": lambda: S.model_of("original", split, 0)}
    models.update({f"digits/retrain{s}": (lambda s=s: S.model_of("retrain", split, s))
                   for s in range(100, 100 + a.retrains)})
    for seed, family in keepers:
        models[f"digits/{seed}/{family}"] = (lambda seed=seed, family=family: S.cached_attack(
            family, S.model_of("original", split, seed), S.model_of("retrain", split, 1000 + seed), split, seed,
            Path(S.DEFAULT_CACHE))[0])
    x, y = S.sibling("attack_mean_matched").penultimate(models["digits/original0"](), split)
    S.sibling("mlp_probe").probe_batched(x, y, seeds[:1], epochs=2)  # warm-up: torch's first calls, not the probe
    for key, make in models.items():
        rows[key] = measure(S, make(), split, seeds)
        print(f"{key}: {json.dumps({k: round(v, 4) for k, v in rows[key].items() if not isinstance(v, list)})}",
              flush=True)
    if a.mnist5k:
        split5k = make_split(load_dataset("mnist5k"), ForgetSpec(classes=(3,)))
        for s in range(a.mnist5k):
            rows[f"mnist5k/retrain{s}"] = r = measure(S, S.model_of("retrain", split5k, s), split5k, seeds)
            print(f"mnist5k/retrain{s}: sklearn {r['sklearn']:.4f} ({r['sklearn_s']:.1f} s), batched "
                  f"{r['batched']:.4f} ({r['batched_s']:.1f} s)", flush=True)
    lines = summary(rows)
    print("\n".join(lines))
    if a.out:
        from unlearnkit.checkpoints import atomic_write_text

        atomic_write_text(a.out, json.dumps({"args": vars(a), "rows": rows, "summary": lines}, indent=1) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
