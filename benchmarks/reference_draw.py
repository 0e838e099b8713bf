"""One reference set against many genuine retrains: how often it flags or fails to certify them, and why (issue 42).

    .venv/bin/python benchmarks/reference_draw.py --seed 5 --k 8 --audit-seed 413084969 \
        --out benchmarks/results/reference_draw_digits_s5.json

The audit's false-flag rate holds on average over reference sets; a given set can sit unluckily tight. Per run:
the original of ``--seed`` (digits, class 3, small_cnn, from the model cache), its K references (retrains of
seeds s .. s + K − 1, as ``unlearnkit run`` trains them) and genuine held-out retrains (110 and 111, seeds
s + K .. s + 31, and 5000 + 10 s .. + 7: none is a reference), each audited against the same references with
the same audit seed (the references' numbers computed once). It prints the verdicts, and for every check that
flagged or left a retrain uncertified, the check's value on the references and on the held-out retrains (mean,
standard deviation, Shapiro-Wilk p): whether the retrains' population is wider than the references say. Writes
``--out`` (JSON, atomically).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--audit-seed", type=int, required=True)
    p.add_argument("--out", default=str(HERE / "results" / "reference_draw.json"))
    a = p.parse_args(argv)
    if a.k < 2 or a.k > 30:
        p.error("--k must be 2 to 30")
    sys.path.insert(0, str(HERE))
    import attack_suite as S
    import torch
    from scipy import stats

    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.core import audit
    from unlearnkit.audit.memo import AuditCache
    from unlearnkit.checkpoints import atomic_write_text

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    split = make_split(load_dataset("digits"), ForgetSpec(classes=(3,)))
    original = S.model_of("original", split, a.seed)
    refs = [S.model_of("retrain", split, a.seed + i) for i in range(a.k)]
    held = [110, 111, *range(a.seed + a.k, a.seed + 32), *(5000 + 10 * a.seed + j for j in range(8))]
    cache, rows, values = AuditCache(), [], collections.defaultdict(dict)
    for s in held:
        rep = audit(original, S.model_of("retrain", split, s), refs, split,
                    config=AuditConfig(audit_seed=a.audit_seed), cache=cache)
        open_ = [c.measure.label for c in rep.checks if c.flag or (c.testable and not c.within) or c.deviates]
        rows.append({"retrain": s, "verdict": rep.verdict, "evidence": rep.evidence[1:2], "checks": open_})
        for c in rep.checks:
            values[c.measure.label][s] = c.measure.unlearned
            values[c.measure.label]["references"] = list(c.measure.references)
            values[c.measure.label]["original"] = c.measure.original
        print(f"retrain {s:5d} -> {rep.verdict:14s} {'; '.join(open_)[:110]}", flush=True)
    spread = {}
    for label in sorted({c for r in rows for c in r["checks"]}):
        v = np.array([values[label][s] for s in held], dtype=float)
        r = np.array(values[label]["references"], dtype=float)
        spread[label] = {"original": values[label]["original"], "references_mean": r.mean(),
                         "references_sd": r.std(ddof=1), "held_out_mean": v.mean(), "held_out_sd": v.std(ddof=1),
                         "shapiro_p": float(stats.shapiro(np.r_[v, r]).pvalue)}
        print(f"{label}: original {spread[label]['original']:.3f}; references {r.mean():.3f} ± {r.std(ddof=1):.3f}; "
              f"{len(v)} held-out retrains {v.mean():.3f} ± {v.std(ddof=1):.3f}; Shapiro-Wilk p (all) "
              f"{spread[label]['shapiro_p']:.2f}")
    counts = collections.Counter(r["verdict"] for r in rows)
    print(dict(counts))
    atomic_write_text(a.out, json.dumps({"args": vars(a), "rows": rows, "counts": counts, "spread": spread,
                                         "elapsed_s": time.perf_counter() - t0}, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
