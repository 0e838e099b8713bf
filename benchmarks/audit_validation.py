"""The audit's validation matrix: verdicts on models whose truth is known by construction,
across architectures, datasets and kinds of forgetting, with one reference and with K.

    .venv/bin/python benchmarks/audit_validation.py                      # digits, 3 architectures
    .venv/bin/python benchmarks/audit_validation.py --datasets digits,mnist5k --models small_cnn

For every (architecture, dataset, forgetting) the original (seed 0), K retrained references
(seeds 0..K-1) and ``--truth-seeds`` T more retrains (seeds 100..100+T-1: held out from the
references and from the calibration, which used seeds 0..4) come through the model cache. Cases:

``--forget`` is ``class`` (default), ``random`` or ``flipped`` (mislabeled data: a fraction of the training
set trained with flipped labels, the forget set; its originals of seeds 0..``--original-seeds``-1 are
audited too: each must read ``not_forgotten``).

* ``retrain`` x T (truth: erased; anything but erased / inconclusive is a **false flag**);
* ``masked``: the original with the class masked at its output (class forgetting only) and
  ``head_retrained``: the original's head re-initialised and retrained on the retained data, body
  frozen (truth: suppressed; ``erased`` is a **false erasure**);
* ``original`` (truth: not forgotten; ``erased`` is a false erasure);
* ``mean_matched``: the adversary's model of issue 28 (``attack_mean_matched.mean_matched``: the output
  forgets, retained accuracy kept, the forget rows' feature mean matched to the retained rows' at every
  audited layer; the class is still there; truth: not erased, ``erased`` is a false erasure);
* ``noised``: the original with Gaussian noise of 3x each tensor's std on every weight (truth:
  collapsed).

Each case is audited against reference 0 alone (K = 1: the calibrated constant on small_cnn, the
``uncalibrated`` rule elsewhere) and against all K references (tolerances derived from their
spread, :mod:`unlearnkit.audit.tolerance`; with K >= 2 the MMD² ratio and the output membership test
decide too, and one reference can never certify ``erased``). Held-out by construction: the one-reference
constant was calibrated on small_cnn with classes 3, 6 and 8 forgotten (``audit_calibrate.py``, both
datasets); here the class is 5 (``--forget-class``, held out of both calibrations), the truth seeds are
new (100..), and mlp / resnet18 (width 16) are architectures the constants never saw. Rates carry exact
(Clopper-Pearson) 95 % intervals. Prints one row per audit, the confusion matrix per
architecture, and writes ``--out`` (JSON).
"""
from __future__ import annotations

import argparse
import collections
import json
import secrets
import sys
import time
from pathlib import Path

import torch

MODELS = {"small_cnn": ("small_cnn", {}), "mlp": ("mlp", {}), "resnet18_w16": ("resnet18", {"width": 16})}


def expected(case: str) -> str:
    return {"retrain": "erased", "masked": "suppressed", "head_retrained": "suppressed",
            "original": "not_forgotten", "noised": "collapsed", "mean_matched": "not erased"}[case]


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
    spec = {"class": lambda: ForgetSpec(classes=(a.forget_class,)),
            "random": lambda: ForgetSpec(random=a.forget_random),
            "flipped": lambda: ForgetSpec(flipped=a.forget_flipped)}[forget]()
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
    if forget == "class":
        cases.append(("head_retrained", "", head_retrained(original, split)))
    cases += [("original", "", original), ("noised", "", noised(original, 3.0))]
    if forget == "flipped":  # the originals of other seeds: each memorised its flipped labels
        cases += [("original", f"s{s}", ref("original", s)) for s in range(1, a.original_seeds)]
    if forget == "class" and a.mean_matched:
        attack = sibling("attack_mean_matched")
        cases.append(("mean_matched", "", attack.mean_matched(original, split, seed=0)))
    layers = audit_layers(original)
    outs = {id(m): model_outputs(m, split, layers) for m in [original, *refs]}
    for k in sorted({1, a.references}):
        cache, cfg = AuditCache(), AuditConfig(audit_seed=secrets.randbits(31))  # one fresh seed per K: a run's
        for case, tag, model in cases:
            t1 = time.perf_counter()
            rep = audit(original, model, refs[:k], split, layers, config=cfg, cache=cache,
                        outputs={"original": outs[id(original)],
                                 "retrained": [outs[id(r)] for r in refs[:k]]})
            pen = rep.layer(rep.penultimate) if rep.layers[rep.rests_on] else None
            testable = [c for c in rep.checks if c.testable]
            row = {"arch": arch, "dataset": dataset, "forget": forget, "k": k, "case": case, "tag": tag,
                   "verdict": rep.verdict, "expected": expected(case), "error": error(case, rep.verdict),
                   "rests_on": rep.rests_on, "evidence": rep.evidence[:4], "verdict_line": rep.verdict_line,
                   "audit_seed": rep.config.audit_seed, "testable": len(testable),
                   "within": sum(c.within for c in testable), "flagged": [c.measure.label for c in rep.checks
                                                                          if c.flag],
                   "sep_penultimate": pen.separability_ratio.value if pen and pen.separability_ratio else None,
                   "audit_s": time.perf_counter() - t1}
            rows.append(row)
            print(f"{arch:13s} {dataset:8s} {forget:6s} K={k} {case:15s} {tag:5s} -> {rep.verdict:14s}"
                  f"{'  ** ' + row['error'] if row['error'] else ''}  testable {row['testable']}, within "
                  f"{row['within']}, flagged {len(row['flagged'])}  ({row['audit_s']:.0f}s)", flush=True)
    print(f"  [{arch} {dataset} {forget}: models {train_s:.0f}s]", flush=True)


def sibling(name: str):
    """``benchmarks/<name>.py`` imported once (benchmarks is not a package)."""
    import importlib.util

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


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
                rep = audit(original, model, refs[:k], split, layers, config=AuditConfig(audit_seed=k), cache=cache,
                            outputs={"original": outs[id(original)],
                                     "retrained": [outs[id(r)] for r in refs[:k]]})
                rows.append({"arch": "small_cnn", "dataset": "digits", "forget": "class", "k": k, "case": "method",
                             "tag": f"{name} s{seed}", "method": name, "verdict": rep.verdict, "expected": None,
                             "error": None, "forgetting_quality": scores.get(name),
                             "evidence": rep.evidence[:3]})
                print(f"method {name:12s} s{seed} K={k} -> {rep.verdict:14s} forgetting quality "
                      f"{scores.get(name)}", flush=True)


def _rate(k: int, n: int) -> str:
    """``k/n`` with its exact (Clopper-Pearson) 95 % interval."""
    if not n:
        return "-"
    lo, hi = sibling("audit_calibrate").clopper_pearson(k, n)
    return f"{k}/{n} [{100 * lo:.0f}, {100 * hi:.0f} %]"


def summary(rows: list[dict]) -> list[str]:
    lines = ["| architecture | dataset | K | retrains flagged | retrains erased | false erased (kept class: masked, "
             "head retrained, original, mean-matched) | suppressed caught | collapsed caught |",
             "|---|---|---|---|---|---|---|---|"]
    groups = collections.defaultdict(list)
    for r in rows:
        if r["case"] != "method":
            groups[(r["arch"], r["dataset"], r["k"])].append(r)
    for (arch, dataset, k), rs in sorted(groups.items()):
        ret = [r for r in rs if r["case"] == "retrain"]
        sup = [r for r in rs if r["expected"] == "suppressed"]
        neg = [r for r in rs if r["case"] in ("masked", "head_retrained", "original", "mean_matched")]
        col = [r for r in rs if r["case"] == "noised"]
        lines.append(f"| {arch} | {dataset} | {k} | {_rate(sum(r['error'] == 'false_flag' for r in ret), len(ret))} "
                     f"| {sum(r['verdict'] == 'erased' for r in ret)}/{len(ret)} "
                     f"| {_rate(sum(r['error'] == 'false_erased' for r in neg), len(neg))} "
                     f"| {sum(r['verdict'] == 'suppressed' for r in sup)}/{len(sup)} "
                     f"| {sum(r['verdict'] == 'collapsed' for r in col)}/{len(col)} |")
    for k in sorted({r["k"] for r in rows if r["case"] != "method"}):
        ret = [r for r in rows if r["case"] == "retrain" and r["k"] == k]
        neg = [r for r in rows if r["k"] == k and r["case"] in ("masked", "head_retrained", "original", "mean_matched")]
        lines.append(f"| **all** | | {k} | {_rate(sum(r['error'] == 'false_flag' for r in ret), len(ret))} "
                     f"| {sum(r['verdict'] == 'erased' for r in ret)}/{len(ret)} "
                     f"| {_rate(sum(r['error'] == 'false_erased' for r in neg), len(neg))} | | |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="digits")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--forget", default="class")
    p.add_argument("--forget-class", type=int, default=5, help="held out of the calibrations (3, 6, 8)")
    p.add_argument("--no-mean-matched", dest="mean_matched", action="store_false",
                   help="leave out the mean-matched attack model (class forgetting)")
    p.add_argument("--forget-random", type=float, default=0.1)
    p.add_argument("--forget-flipped", type=float, default=0.05, help="--forget flipped: the mislabeled fraction")
    p.add_argument("--original-seeds", type=int, default=5, help="--forget flipped: originals of seeds 0..N-1")
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
    from unlearnkit.checkpoints import atomic_write_text

    def save() -> None:  # after every setting: an interrupted run keeps what it finished
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(a.out, json.dumps({"args": vars(a), "rows": rows, "summary": summary(rows)}, indent=1)
                          + "\n")

    for dataset in a.datasets.split(",") if not a.skip_matrix else []:
        for arch in a.models.split(","):
            for forget in a.forget.split(","):
                run_setting(arch, dataset, forget, a, rows)
                save()
    if a.methods:
        run_methods(a, rows)
    print("\n".join(summary(rows)))
    save()
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
