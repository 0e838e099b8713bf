"""Would an MLP probe, judged by the audit's own rule, decide the attacks that win? (issue 42)

    .venv/bin/python benchmarks/attack_probe_rule.py --dataset digits --seeds 0,1,2,3,4,5 \
        --out benchmarks/results/attack_probe_rule_digits.json

The attack suite's ``hardened`` family (``hardened``, ``hardened_keep3``, ``hardened_keep10``: trained to match
every statistic the verdict reads while a jointly trained MLP probe keeps the class decodable) is caught by
the ground truth's MLP probe and, on some seeds, certified by the audit. This asks whether the audit would
catch it if it read such a probe itself: per seed s, the held-out log loss ℓ of ``mlp_probe.probe`` (a one-hidden-
layer scikit-learn MLP, 5 folds, seeded by ``--probe-seed``, not the ground truth's seed) of forget vs retained
training rows at the penultimate layer, oriented as the audit orients a statistic (−log ℓ: more means more of
the class), on the original, the references (retrains of seeds s .. s + K − 1, K = 5 and 8), the two genuine
held-out retrains (100 + 2s, 101 + 2s) and each attacked model (from the attack suite's cache), each judged by
``metrics.equivalence.judge`` at the representation's margin (0.5): the original's excess in the references'
standard deviations (D), the kept fraction with its interval, whether the check is testable, certifies, and
whether it flags (beyond the references' one-sided 95 % prediction bound, the rule's default level, without the
Holm step an audit applies over a family).

It is a measurement, not a check the audit runs. Writes ``--out`` (JSON, atomically) with one row per seed, K
and model, and prints them. ``--noise-seeds`` (e.g. ``11,22,33,44``) also repeats the probe under those seeds on
the models of seed ``--noise-on`` (``noise`` in the JSON: each model's values and their standard deviation), to tell the
probe's own noise from the spread between retrains.
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits", choices=("digits", "mnist5k"))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--probe-seed", type=int, default=77)
    p.add_argument("--noise-seeds", default="", help="repeat the probe under these seeds on --noise-on's models")
    p.add_argument("--noise-on", type=int, default=1)
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "unlearnkit" / "attacks"))
    p.add_argument("--out", default=str(HERE / "results" / "attack_probe_rule.json"))
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", module="sklearn")
    sys.path.insert(0, str(HERE))
    import attack_suite as S

    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.checkpoints import atomic_write_text
    from unlearnkit.metrics.equivalence import judge

    split = make_split(load_dataset(a.dataset), ForgetSpec(classes=(3,)))
    penultimate, probe = S.sibling("attack_mean_matched").penultimate, S.sibling("mlp_probe").probe
    memo: dict = {}

    def stat(key, model) -> float:
        if key not in memo:
            memo[key] = -math.log(probe(*penultimate(model, split), a.probe_seed)[0])
        return memo[key]

    rows, noise, t0 = [], {}, time.perf_counter()
    for s in map(int, a.seeds.split(",")):
        original = S.model_of("original", split, s)
        attacker = S.model_of("retrain", split, 1000 + s)
        nets = {"original": original, **{f"retrain{s + i}": S.model_of("retrain", split, s + i) for i in range(8)},
                **{f"retrain{g}": S.model_of("retrain", split, g) for g in (100 + 2 * s, 101 + 2 * s)}}
        for family in a.families.split(","):
            nets[family] = S.cached_attack(family, original, attacker, split, s, Path(a.cache))[0]
        o = stat(("original", s), original)
        refs = [stat(("retrain", s + i), nets[f"retrain{s + i}"]) for i in range(8)]
        models = {name: stat(("retrain", int(name[7:])) if name.startswith("retrain") else (name, s), m)
                  for name, m in list(nets.items())[9:]}
        if a.noise_seeds and s == a.noise_on:
            for name, m in nets.items():
                x, y = penultimate(m, split)
                vals = [-math.log(probe(x, y, int(v))[0]) for v in a.noise_seeds.split(",")]
                noise[name] = {"seed": s, "values": vals, "sd": float(np.std(vals, ddof=1))}
                print(f"noise s{s} {name:16s} " + " ".join(f"{v:.3f}" for v in vals) + f" sd {noise[name]['sd']:.3f}")
        for k in (5, 8):
            centre, spread = float(np.mean(refs[:k])), float(np.std(refs[:k], ddof=1))
            for name, u in models.items():
                r = judge(u, o, refs[:k], margin=0.5)
                rows.append({"seed": s, "k": k, "model": name, "value": u, "original": o, "references": refs[:k],
                             "excess_sds": (o - centre) / spread, "kept": r.kept,
                             "kept_interval": [r.kept_low, r.kept_high], "testable": r.testable,
                             "certifies": bool(r.testable and r.within), "flag": r.flag or None})
                print(f"s{s} K={k} {name:16s} D={(o - centre) / spread:5.1f} kept {r.kept:+.2f} "
                      f"[{r.kept_low:+.2f}, {r.kept_high:+.2f}] testable={r.testable!s:5s} "
                      f"certifies={rows[-1]['certifies']!s:5s} flag={r.flag or '-'}", flush=True)
    atomic_write_text(a.out, json.dumps({"args": vars(a), "rows": rows, "noise": noise,
                                         "elapsed_s": time.perf_counter() - t0,
                                         "torch": torch.__version__}, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
