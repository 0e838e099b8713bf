"""Calibrate the one-reference separability tolerance from pairs of retrains, and hold cases out.

``python benchmarks/audit_calibrate.py --dataset digits --classes 3,6,8 --seeds 6``

Trains (through the model cache) ``--seeds`` retrains of ``small_cnn`` without each forgotten class
of ``--classes``, and the original. For every class, layer and *ordered pair* (i, j) of distinct
retrains it computes the audit's separability ratio U_i / U_j on the training split's forget vs
retained rows (:func:`unlearnkit.metrics.lda.unbiased_separability` / ``ratio_interval``, the statistic the
verdict reads) with its 95 % interval, and the masked original's (the original, whose
representation is the one a kept class leaves) ratio over each retrain.

The constant tolerance is the smallest ratio t such that every retrain-vs-retrain pair of the
*calibration* classes has its point estimate within [1/t, t], widened by the largest upper interval
end's excess (the rule a genuine retrain must pass with one reference); the *held-out* classes
(``--holdout``) then report how often a genuine retrain's interval is not inside [1/t, t] (would not be
certified) and how often it is significantly beyond (would be flagged), and how often the original
is inside (a kept class certified: must be 0), with exact (Clopper-Pearson) 95 % bounds.
Writes ``benchmarks/results/audit_calibration_<dataset>.json``. It trains models: an experiment,
kept out of the audit package.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

import torch
from scipy import stats

from unlearnkit import validate
from unlearnkit.audit import AuditConfig
from unlearnkit.audit.data import train_data
from unlearnkit.checkpoints import atomic_write_text
from unlearnkit.data.datasets import load_dataset
from unlearnkit.data.splits import ForgetSpec, make_split
from unlearnkit.errors import UserError
from unlearnkit.evaluation import model_outputs
from unlearnkit.metrics.lda import ratio_interval, unbiased_separability
from unlearnkit.models.zoo import audit_layers
from unlearnkit.training import default_recipe, reference_model

OUT = Path(__file__).parent / "results"


def clopper_pearson(k: int, n: int, level: float = 0.95) -> list[float]:
    """Exact two-sided binomial interval for k successes in n trials."""
    a = 1 - level
    lo = 0.0 if k == 0 else float(stats.beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - a / 2, k + 1, n - k))
    return [lo, hi]


def class_stats(bundle, cls: int, seeds: int, cfg: AuditConfig, device: str = "cpu",
                cache_dir: str | None = None) -> dict:
    """Per layer, the separability of the original and of each retrain on the training split's rows."""
    split = make_split(bundle, ForgetSpec(classes=(cls,)))
    recipe = default_recipe(bundle.name, "small_cnn")
    data = train_data(split, cfg)
    kw = {"device": device, "cache_dir": cache_dir, "progress": False}
    models = {"original": reference_model("original", split, "small_cnn", recipe, seed=0, **kw).model}
    for s in range(seeds):
        models[f"retrain{s}"] = reference_model("retrain", split, "small_cnn", recipe, seed=s, **kw).model
    layers = list(audit_layers(models["original"]))
    out = {}
    for name, m in models.items():
        outs = model_outputs(m.eval(), split, layers, device=device)  # features come back on the CPU
        out[name] = {layer: unbiased_separability(data.features(outs, layer), data.is_forget) for layer in layers}
    return {"layers": layers, "sep": out, "is_forget": data.is_forget}


def _finite(o):
    """JSON without NaN/Infinity: non-finite floats as strings ("inf", "nan")."""
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    return o


def pairs(cs: dict, seeds: int) -> list[dict]:
    rows = []
    y = cs["is_forget"]
    for layer in cs["layers"]:
        for i, j in itertools.permutations(range(seeds), 2):
            r = ratio_interval(cs["sep"][f"retrain{i}"][layer], [cs["sep"][f"retrain{j}"][layer]], y, 0.95)
            rows.append({"layer": layer, "pair": [i, j], "kind": "retrain", "ratio": r.value, "low": r.low,
                         "high": r.high, "status": r.status})
        for j in range(seeds):
            r = ratio_interval(cs["sep"]["original"][layer], [cs["sep"][f"retrain{j}"][layer]], y, 0.95)
            rows.append({"layer": layer, "pair": ["original", j], "kind": "original", "ratio": r.value,
                         "low": r.low, "high": r.high, "status": r.status})
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--classes", default="3,6,8", help="calibration classes")
    p.add_argument("--holdout", default="1,5,7", help="held-out classes (disjoint from --classes)")
    p.add_argument("--seeds", type=int, default=6, help="retrains per class (seeds 0..N-1)")
    p.add_argument("--device", default="cpu", help="where the models train and run (cpu, cuda)")
    p.add_argument("--cache-dir", default=None, help="model cache (default ~/.cache/unlearnkit/models)")
    a = p.parse_args(argv)
    try:  # one line for a device this machine lacks, before any model trains
        validate.device("--device", a.device)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cal, hold = [int(c) for c in a.classes.split(",")], [int(c) for c in a.holdout.split(",") if c]
    if set(cal) & set(hold):
        raise SystemExit("error: --classes and --holdout must be disjoint")
    bundle, cfg = load_dataset(a.dataset), AuditConfig()
    rows = {}
    for cls in cal + hold:
        rows[cls] = pairs(class_stats(bundle, cls, a.seeds, cfg, a.device, a.cache_dir), a.seeds)
        print(f"class {cls}: {time.perf_counter() - t0:.0f}s", flush=True)
    ok = [r for c in cal for r in rows[c] if r["kind"] == "retrain" and r["status"] == "ok"]
    # the tolerance: every calibration pair's whole interval inside [1/t, t]
    t = math.exp(max(max(abs(math.log(r["low"])) if r["low"] > 0 else math.inf, abs(math.log(r["high"])))
                     for r in ok))
    report = {"dataset": a.dataset, "model": "small_cnn", "calibration_classes": cal, "holdout_classes": hold,
              "seeds": a.seeds, "device": a.device, "torch": torch.__version__, "tolerance": t,
              "calibration_pairs": len(ok),
              "calibration_undefined": sum(1 for c in cal for r in rows[c] if r["status"] != "ok"),
              "rows": {str(c): rows[c] for c in rows}}
    for c in cal:
        rs = [r for r in rows[c] if r["kind"] == "retrain" and r["status"] == "ok"]
        print(f"calibration class {c}: retrain pairs {len(rs)}, ratio range "
              f"{min(r['ratio'] for r in rs):.2f}-{max(r['ratio'] for r in rs):.2f}, interval ends "
              f"{min(r['low'] for r in rs):.2f}-{max(r['high'] for r in rs):.2f}")
    print(f"one-reference tolerance: {t:.2f}x (from {len(ok)} ordered pairs of {a.seeds} retrains, classes {cal})")
    held = {}
    for c in hold:
        rs = [r for r in rows[c] if r["kind"] == "retrain" and r["status"] == "ok"]
        og = [r for r in rows[c] if r["kind"] == "original" and r["status"] in ("ok", "separated")]
        # per (pair): certified at every layer? flagged at some layer?
        by_pair: dict = {}
        for r in rs:
            by_pair.setdefault(tuple(r["pair"]), []).append(r)
        not_inside = sum(any(not (1 / t < r["low"] and r["high"] < t) for r in v) for v in by_pair.values())
        flagged = sum(any(r["low"] > t or r["high"] < 1 / t for r in v) for v in by_pair.values())
        by_ref: dict = {}
        for r in og:
            by_ref.setdefault(r["pair"][1], []).append(r)
        orig_inside = sum(all(1 / t < r["low"] and r["high"] < t for r in v) for v in by_ref.values())
        n = len(by_pair)
        held[str(c)] = {"retrain_pairs": n, "retrain_not_certified": not_inside,
                        "retrain_flagged": flagged, "retrain_flagged_bound": clopper_pearson(flagged, n),
                        "original_audits": len(by_ref), "original_inside_everywhere": orig_inside,
                        "original_inside_bound": clopper_pearson(orig_inside, len(by_ref))}
        print(f"held-out class {c}: retrain pairs {n}: not certified {not_inside}, flagged {flagged} "
              f"(95% bound {held[str(c)]['retrain_flagged_bound'][1]:.3f}); original inside everywhere "
              f"{orig_inside}/{len(by_ref)}")
    report["holdout"] = held
    report["seconds"] = time.perf_counter() - t0
    OUT.mkdir(exist_ok=True)
    path = OUT / f"audit_calibration_{a.dataset}.json"
    atomic_write_text(path, json.dumps(_finite(report), indent=1) + "\n")
    print(f"wrote {path} ({report['seconds']:.0f}s)")


if __name__ == "__main__":
    main()
