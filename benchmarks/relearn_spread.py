"""How retrains spread on the audit's relearning statistics: are their log-odds Gaussian, as the flag assumes?

    .venv/bin/python benchmarks/relearn_spread.py --dataset mnist5k --audit-seeds 2080249877,1,2 \
        --out benchmarks/results/relearn_spread_mnist5k.json

For each audit seed, the audit's relearning plan (``audit.relearning.relearn_plan``, class 3, the default
``AuditConfig``) is run on every cached small_cnn retrain of the dataset (seeds ``--retrains``) with
``relearn_model`` (canonical copies, as the audit does). Per (held-out set, learning rate, budget) it prints the
retrains' mean log-odds (φ) of the class on the held-out rows: their median, spread and largest, and how many
retrains lie beyond the Gaussian prediction bound (5 % one-sided, t with K − 1 degrees of freedom) that the
*other* retrains' values give when K of them are drawn at random (``--k``, 2,000 draws): the rate at which a
genuine retrain would sit above the flag's bound at K references before any Holm correction, where a Gaussian
statistic gives 5 %. Writes ``--out`` (JSON, atomically).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


def beyond_rate(values: np.ndarray, k: int, rng: np.random.Generator, draws: int = 2000) -> float:
    """How often one value lies above the one-sided 95 % Gaussian prediction bound of ``k`` others drawn at
    random from the rest (a genuine retrain against ``k`` references)."""
    from scipy import stats

    q = stats.t.ppf(0.95, k - 1) * math.sqrt(1 + 1 / k)
    hits = 0
    for _ in range(draws):
        i = rng.integers(len(values))
        refs = rng.choice(np.delete(values, i), k, replace=False)
        hits += values[i] > refs.mean() + q * refs.std(ddof=1)
    return hits / draws


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist5k", choices=("digits", "mnist5k"))
    p.add_argument("--audit-seeds", default="2080249877,1,2")
    p.add_argument("--retrains", default="0-16,100-111,1000-1002", help="retrain seeds (ranges allowed)")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--out", default=str(HERE / "results" / "relearn_spread.json"))
    a = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    import attack_suite as S

    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.relearning import relearn_model, relearn_plan
    from unlearnkit.checkpoints import atomic_write_text

    seeds = [s for part in a.retrains.split(",")
             for s in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)]
    split = make_split(load_dataset(a.dataset), ForgetSpec(classes=(3,)))
    models = {s: S.model_of("retrain", split, s) for s in seeds}
    rng = np.random.default_rng(0)
    out, t0 = [], time.perf_counter()
    for audit_seed in map(int, a.audit_seeds.split(",")):
        cfg = AuditConfig(audit_seed=audit_seed)
        plan, why = relearn_plan(split, cfg, audit_seed)
        curves = {s: relearn_model(m, plan, split, cfg, torch.device("cpu")) for s, m in models.items()}
        for key in sorted(next(iter(curves.values())).phi):
            phi = np.array([curves[s].phi[key] for s in seeds])
            rate = beyond_rate(phi, a.k, rng)
            row = {"audit_seed": audit_seed, "set": key[0], "lr": key[1], "budget": key[2],
                   "phi": dict(zip(map(str, seeds), phi.tolist())), "median": float(np.median(phi)),
                   "sd": float(np.std(phi, ddof=1)), "max": float(phi.max()),
                   "prob_max": float(max(curves[s].prob[key] for s in seeds)), "beyond_rate": rate}
            out.append(row)
            print(f"seed {audit_seed} {key[0]:5s} lr {key[1]} {key[2]:2d} steps: φ median {row['median']:+.2f} sd "
                  f"{row['sd']:.2f} max {row['max']:+.2f} (p {row['prob_max']:.2f}); above a K={a.k} bound "
                  f"{100 * rate:.1f} %", flush=True)
    atomic_write_text(a.out, json.dumps({"args": vars(a), "retrains": seeds, "rows": out,
                                         "elapsed_s": time.perf_counter() - t0, "torch": torch.__version__},
                                        indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
