"""The audit's validation matrix: verdicts on models whose truth is known by construction,
across architectures, datasets and kinds of forgetting, with one reference and with K.

    .venv/bin/python benchmarks/audit_validation.py                      # digits, 3 architectures
    .venv/bin/python benchmarks/audit_validation.py --datasets digits,mnist5k --models small_cnn

For every (architecture, dataset, forgetting) the original (seed 0), K retrained references
(seeds 0..K-1) and ``--truth-seeds`` T more retrains (seeds 100..100+T-1: held out from the
references and from the calibration, which used seeds 0..4) come through the model cache. Cases:

* ``retrain`` x T (truth: erased; anything but erased / inconclusive is a **false flag**);
* ``masked``: the original with the class masked at its output (class forgetting only) and
  ``head_retrained``: the original's head re-initialised and retrained on the retained data, body
  frozen (truth: suppressed; ``erased`` is a **false erasure**);
* ``original`` (truth: not forgotten; ``erased`` is a false erasure);
* ``noised``: the original with Gaussian noise of 3x each tensor's std on every weight (truth:
  collapsed).

Each case is audited against reference 0 alone (K = 1: the calibrated constant on small_cnn, the
``uncalibrated`` rule elsewhere) and against all K references (tolerances derived from their
spread, :mod:`unlearnkit.audit.tolerance`). Held-out by construction: the tolerance rule and its
constants were set on small_cnn with class 3 forgotten (``audit/config.py`` CALIBRATION); here the
class is 8 (``--forget-class``), the truth seeds are new, and mlp / resnet18 (width 16) are
architectures the constants never saw. Prints one row per audit, the confusion matrix per
architecture, and writes ``--out`` (JSON).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import torch

MODELS = {"small_cnn": ("small_cnn", {}), "mlp": ("mlp", {}), "resnet18_w16": ("resnet18", {"width": 16})}


def expected(case: str) -> str:
    return {"retrain": "erased", "masked": "suppressed", "head_retrained": "suppressed",
            "original": "not_forgotten", "noised": "collapsed"}[case]


def error(case: str, verdict: str) -> str | None:
    """What kind of error a verdict is for a case, or None when it is acceptable."""
    if case == "retrain":
        return None if verdict in ("erased", "inconclusive") else "false_flag"
    if case == "noised":
        return None if verdict == "collapsed" else "missed_collapse"
    return "false_erased" if verdict == "erased" else None


def run_setting(arch: str, dataset: str, forget: str, a, rows: list[dict]) -> None:
    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.audit import AuditConfig, audit
    from unlearnkit.audit.constructed import head_retrained, masked_head, noised
    from unlearnkit.audit.memo import AuditCache
    from unlearnkit.evaluation import model_outputs
    from unlearnkit.models.zoo import audit_layers
    from unlearnkit.training import default_recipe, reference_model

    name, kwargs = MODELS[arch]
    bundle = load_dataset(dataset)
    spec = ForgetSpec(classes=(a.forget_class,)) if forget == "class" else ForgetSpec(random=a.forget_random)
    split = make_split(bundle, spec)
    recipe = default_recipe(bundle.name, name)

    def ref(kind: str, seed: int):
        return reference_model(kind, split, name, recipe, seed=seed, model_kwargs=kwargs,
                               progress=False).model

    t0 = time.perf_counter()
    original = ref("original", 0)
    refs = [ref("retrain", s) for s in range(a.references)]
    cases = [("retrain", f"s{100 + i}", ref("retrain", 100 + i)) for i in range(a.truth_seeds)]
    train_s = time.perf_counter() - t0
    if forget == "class":
        cases.append(("masked", "", masked_head(original, (a.forget_class,))))
    cases += [("head_retrained", "", head_retrained(original, split)), ("original", "", original),
              ("noised", "", noised(original, 3.0))]
    layers = audit_layers(original)
    outs = {id(m): model_outputs(m, split, layers) for m in [original, *refs]}
    for k in sorted({1, a.references}):
        cache, cfg = AuditCache(), AuditConfig()
        for case, tag, model in cases:
            t1 = time.perf_counter()
            rep = audit(original, model, refs[:k], split, layers, config=cfg, cache=cache,
                        outputs={"original": outs[id(original)],
                                 "retrained": [outs[id(r)] for r in refs[:k]]})
            pen = rep.layer(rep.penultimate) if rep.layers[rep.rests_on] else None
            row = {"arch": arch, "dataset": dataset, "forget": forget, "k": k, "case": case, "tag": tag,
                   "verdict": rep.verdict, "expected": expected(case), "error": error(case, rep.verdict),
                   "rests_on": rep.rests_on, "evidence": rep.evidence[:3],
                   "tolerance_penultimate": pen.separability_margin if pen else None,
                   "tolerance_source": (pen.tolerance.source if pen and pen.tolerance else None),
                   "sep_penultimate": pen.separability_ratio.value if pen and pen.separability_ratio else None,
                   "audit_s": time.perf_counter() - t1}
            rows.append(row)
            print(f"{arch:13s} {dataset:8s} {forget:6s} K={k} {case:15s} {tag:5s} -> {rep.verdict:14s}"
                  f"{'  ** ' + row['error'] if row['error'] else ''}  tol(pen) "
                  f"{row['tolerance_penultimate'] or float('nan'):.2f}x sep(pen) "
                  f"{row['sep_penultimate'] or float('nan'):.2f}x  ({row['audit_s']:.0f}s)", flush=True)
    print(f"  [{arch} {dataset} {forget}: models {train_s:.0f}s]", flush=True)


def run_methods(a, rows: list[dict]) -> None:
    """Every method of ``--methods``, run with seeds 1..``--method-seeds`` from the small_cnn original
    (digits, class ``--fq-class``), audited with 1 and K references; beside it the forgetting quality
    that ``unlearnkit forgetting-quality`` measured for the same method (``--fq``: its JSON)."""
    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.audit import AuditConfig, audit
    from unlearnkit.audit.memo import AuditCache
    from unlearnkit.evaluation import model_outputs
    from unlearnkit.methods import METHODS
    from unlearnkit.methods.base import preset_for
    from unlearnkit.models.zoo import audit_layers
    from unlearnkit.runner import task_params
    from unlearnkit.training import default_recipe, reference_model

    fq = json.loads(Path(a.fq).read_text()) if a.fq else {}
    scores = {name: m.get("forget_score") for name, m in (fq.get("methods") or {}).items()}
    bundle = load_dataset("digits")
    split = make_split(bundle, ForgetSpec(classes=(a.fq_class,)))
    recipe = default_recipe(bundle.name, "small_cnn")

    def ref(kind: str, seed: int):
        return reference_model(kind, split, "small_cnn", recipe, seed=seed, progress=False).model

    original = ref("original", 0)
    refs = [ref("retrain", s) for s in range(a.references)]
    layers = audit_layers(original)
    outs = {id(m): model_outputs(m, split, layers) for m in [original, *refs]}
    caches = {k: AuditCache() for k in sorted({1, a.references})}
    for name in a.methods.split(","):
        cls = METHODS.get(name)
        for seed in range(1, a.method_seeds + 1):
            method = cls.from_preset(preset_for(bundle.name, "small_cnn"), bundle.name,
                                     **task_params(name, split, {}))
            model = method.unlearn(original, split, original=original, seed=seed).model
            for k, cache in caches.items():
                rep = audit(original, model, refs[:k], split, layers, config=AuditConfig(), cache=cache,
                            outputs={"original": outs[id(original)],
                                     "retrained": [outs[id(r)] for r in refs[:k]]})
                rows.append({"arch": "small_cnn", "dataset": "digits", "forget": "class", "k": k, "case": "method",
                             "tag": f"{name} s{seed}", "method": name, "verdict": rep.verdict, "expected": None,
                             "error": None, "forgetting_quality": scores.get(name),
                             "evidence": rep.evidence[:3]})
                print(f"method {name:12s} s{seed} K={k} -> {rep.verdict:14s} forgetting quality "
                      f"{scores.get(name)}", flush=True)


def summary(rows: list[dict]) -> list[str]:
    lines = ["| architecture | K | retrains flagged | retrains erased | false erased (output-only, original) "
             "| suppressed caught | collapsed caught |", "|---|---|---|---|---|---|---|"]
    groups = collections.defaultdict(list)
    for r in rows:
        if r["case"] != "method":
            groups[(r["arch"], r["k"])].append(r)
    for (arch, k), rs in sorted(groups.items()):
        ret = [r for r in rs if r["case"] == "retrain"]
        sup = [r for r in rs if r["expected"] == "suppressed"]
        neg = [r for r in rs if r["case"] in ("masked", "head_retrained", "original")]
        col = [r for r in rs if r["case"] == "noised"]
        lines.append(f"| {arch} | {k} | {sum(r['error'] == 'false_flag' for r in ret)}/{len(ret)} "
                     f"| {sum(r['verdict'] == 'erased' for r in ret)}/{len(ret)} "
                     f"| {sum(r['error'] == 'false_erased' for r in neg)}/{len(neg)} "
                     f"| {sum(r['verdict'] == 'suppressed' for r in sup)}/{len(sup)} "
                     f"| {sum(r['verdict'] == 'collapsed' for r in col)}/{len(col)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="digits")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--forget", default="class,random")
    p.add_argument("--forget-class", type=int, default=8)
    p.add_argument("--forget-random", type=float, default=0.1)
    p.add_argument("--references", type=int, default=5)
    p.add_argument("--truth-seeds", type=int, default=5)
    p.add_argument("--out", default="benchmarks/results/audit_validation.json")
    p.add_argument("--methods", default="", help="also audit these methods' outputs (small_cnn, digits)")
    p.add_argument("--method-seeds", type=int, default=3)
    p.add_argument("--fq-class", type=int, default=3)
    p.add_argument("--fq", default="", help="forgetting_quality.json of the same methods, for the agreement")
    p.add_argument("--skip-matrix", action="store_true", help="only the methods")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    a = p.parse_args(argv)
    unknown = [m for m in a.models.split(",") if m not in MODELS]
    if unknown:
        print(f"error: unknown model(s) {unknown}; choose from {list(MODELS)}", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    rows: list[dict] = []
    for dataset in a.datasets.split(",") if not a.skip_matrix else []:
        for arch in a.models.split(","):
            for forget in a.forget.split(","):
                run_setting(arch, dataset, forget, a, rows)
    if a.methods:
        run_methods(a, rows)
    lines = summary(rows)
    print("\n".join(lines))
    from unlearnkit.checkpoints import atomic_write_text

    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(a.out, json.dumps({"args": vars(a), "rows": rows, "summary": lines}, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
