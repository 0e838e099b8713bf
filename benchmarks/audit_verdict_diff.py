"""Do two versions of the audit give the same verdicts? A scripted diff over cases whose truth is known.

    .venv/bin/python benchmarks/audit_verdict_diff.py --record before.json     # with the old code
    .venv/bin/python benchmarks/audit_verdict_diff.py --record after.json      # with the new code
    .venv/bin/python benchmarks/audit_verdict_diff.py --compare before.json after.json

small_cnn, class 3 forgotten (``--datasets``, default digits and mnist5k), through the model cache
(``UNLEARNKIT_CACHE``, as ``benchmarks/audit_cost.py``). Cases, each audited with the default
:class:`~unlearnkit.audit.AuditConfig` (resurfacing checks included):

* ``masked`` (truth: suppressed, never erased): the original with class 3 masked at its output;
* ``retrain_s1`` (truth: erased): a retrained model of seed 1 against the seed-0 reference;
* ``head_retrained`` (truth: suppressed): the original's body under a head refitted on retained data;
* ``original`` (truth: not forgotten);
* the same ``masked`` and a seed-4 retrain against K = 3 references (seeds 0-2: tolerances from their
  spread);
* real unlearned models (``--methods``, preset ``small``, seed 0), audited as ``unlearnkit run`` does:
  one shared :class:`~unlearnkit.audit.memo.AuditCache` and the references' outputs passed in. Their
  weights are saved under ``--models`` on first use, so a later run audits the very same models
  whatever has changed in ``unlearnkit.methods`` since.

``--record`` writes per case the verdict, where it rests, every comparison of the verdict's family
(log separability ratio, its interval, Holm-adjusted p-value) and the reported intervals (ΔAUROC,
ΔLPR, with the resplits they used). ``--compare`` prints old vs new per case and exits 1 when a
verdict or a comparison of the family differs.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

METHODS = ("finetune", "gradient_ascent", "random_label", "l1_sparse", "ssd", "scrub")
FAMILY_TOL = 1e-9  # |difference| of a family number (log scale) still called "the same"


def _models(dataset: str):
    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.training import default_recipe, reference_model

    bundle = load_dataset(dataset)
    split = make_split(bundle, ForgetSpec(classes=(3,)))
    recipe = default_recipe(bundle.name, "small_cnn")

    def ref(kind, seed):
        return reference_model(kind, split, "small_cnn", recipe, seed=seed, progress=False).model

    return split, ref("original", 0), [ref("retrain", s) for s in range(5)]


def _unlearned(method: str, original, split, folder: Path, dataset: str):
    """The method's model on ``split`` (preset small, seed 0), from ``folder`` when saved there."""
    from unlearnkit.methods import METHODS as REGISTRY

    path = folder / f"{dataset}-small_cnn-c3-{method}.pt"
    model = copy.deepcopy(original)
    if path.exists():
        model.load_state_dict(torch.load(path, map_location="cpu"))
        return model.eval()
    cls = REGISTRY.get(method)
    m = cls.from_preset("small", None, **cls.task_defaults(split, {}))
    out = m.unlearn(original, split, device="cpu", seed=0).model.cpu().eval()
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(out.state_dict(), path)
    return out


def _interval(iv) -> list | None:
    return None if iv is None else [iv.value, iv.low, iv.high]


def _summary(rep, seconds: float) -> dict:
    layers = {}
    for data, rs in rep.layers.items():
        for r in rs:
            layers[f"{data}/{r.layer}"] = {
                "delta_auroc": _interval(r.delta_auroc), "delta_lpr": _interval(r.delta_lpr),
                "delta_lpr_original": _interval(r.delta_lpr_original),
                "splits": [getattr(r, "auroc_splits", None), getattr(r, "lpr_splits", None)]}
    family = {f"{c.data}/{c.layer}/{c.stat}": [c.value, c.low, c.high, c.p_holm, c.margin] for c in rep.family}
    return {"verdict": rep.verdict, "rests_on": rep.rests_on, "n_forget_needed": rep.n_forget_needed,
            "family": family, "layers": layers, "seconds": seconds, "layers_s": rep.timing.get("layers_s")}


def _audit(name, rows, *args, **kwargs):
    from unlearnkit.audit import audit

    t0 = time.perf_counter()
    rep = audit(*args, **kwargs)
    rows[name] = _summary(rep, time.perf_counter() - t0)
    print(f"{name:40s} {rep.verdict:14s} rests on {rep.rests_on:5s} layers {rows[name]['layers_s']:.1f}s, "
          f"total {rows[name]['seconds']:.1f}s", flush=True)


def record(a) -> None:
    from unlearnkit.audit.constructed import head_retrained, masked_head
    from unlearnkit.audit.memo import AuditCache
    from unlearnkit.evaluation import model_outputs
    from unlearnkit.models.zoo import audit_layers

    rows: dict[str, dict] = {}
    for ds in a.datasets.split(","):
        split, original, refs = _models(ds)
        masked = masked_head(original, (3,))
        _audit(f"{ds}/masked", rows, original, masked, refs[0], split)
        _audit(f"{ds}/retrain_s1", rows, original, refs[1], refs[0], split)
        torch.manual_seed(0)
        _audit(f"{ds}/head_retrained", rows, original, head_retrained(original, split), refs[0], split)
        _audit(f"{ds}/original", rows, original, original, refs[0], split)
        _audit(f"{ds}/K3/masked", rows, original, masked, refs[:3], split)
        _audit(f"{ds}/K3/retrain_s4", rows, original, refs[4], refs[:3], split)
        # as `unlearnkit run` does: one cache, the references' outputs computed once
        layers = audit_layers(original)
        outs = {"original": model_outputs(original, split, layers),
                "retrained": [model_outputs(refs[0], split, layers)]}
        cache = AuditCache()
        for method in [m for m in a.methods.split(",") if m]:
            model = _unlearned(method, original, split, Path(a.models), ds)
            _audit(f"{ds}/run/{method}", rows, original, model, refs[0], split, cache=cache, outputs=outs)
    Path(a.record).write_text(json.dumps(rows, indent=1))
    print(f"wrote {a.record}")


def _fmt(iv) -> str:
    return "-" if iv is None else f"{iv[0]:+.2f} [{iv[1]:+.2f}, {iv[2]:+.2f}]"


def _splits(v: dict) -> str:
    s = v.get("splits") or [None, None]
    return "/".join(str(k or 20) for k in s)  # the old code always used 20


def _family_diff(old: dict, new: dict) -> float:
    """The largest |difference| of a family number (log ratio, its interval ends, Holm p); inf when the
    families differ in their members."""
    if set(old) != set(new):
        return math.inf
    return max((abs(x - y) for k in old for x, y in zip(old[k], new[k]) if math.isfinite(x) or math.isfinite(y)),
               default=0.0)


def compare(a) -> int:
    old, new = (json.loads(Path(p).read_text()) for p in a.compare)
    bad, missing = 0, 0
    print(f"{'case':32s} {'old':>14s} {'new':>14s} {'family max |diff|':>18s} {'layers s old -> new':>22s}")
    for case in old:
        if case not in new:
            missing += 1
            continue
        o, n = old[case], new[case]
        diff = _family_diff(o["family"], n["family"])
        same = o["verdict"] == n["verdict"] and diff <= FAMILY_TOL
        bad += not same
        print(f"{case:32s} {o['verdict']:>14s} {n['verdict']:>14s} {diff:18.2e} "
              f"{o['layers_s']:10.1f} -> {n['layers_s']:5.1f}{'' if same else '   <-- DIFFERS'}")
    if a.detail:
        for case in old:
            if case not in new:
                continue
            print(f"\n{case}: separability (log ratio [interval], Holm p), then the reported intervals")
            for k, v in old[case]["family"].items():
                w = new[case]["family"].get(k)
                print(f"  {k:28s} old {v[0]:+.4f} [{v[1]:+.4f}, {v[2]:+.4f}] p {v[3]:.4f}   new "
                      + ("-" if w is None else f"{w[0]:+.4f} [{w[1]:+.4f}, {w[2]:+.4f}] p {w[3]:.4f}"))
            for k, v in old[case]["layers"].items():
                w = new[case]["layers"].get(k, {})
                print(f"  {k:20s} ΔAUROC {_fmt(v['delta_auroc'])} -> {_fmt(w.get('delta_auroc'))}   "
                      f"ΔLPR {_fmt(v['delta_lpr'])} -> {_fmt(w.get('delta_lpr'))} "
                      f"(resplits ΔAUROC, ΔLPR {_splits(v)} -> {_splits(w)})")
    print(f"\n{len(old) - missing} cases in both records, {bad} differ (verdict, or a family number by more "
          f"than {FAMILY_TOL:g}){f'; {missing} only in the old record' if missing else ''}")
    return 1 if bad else 0


def main() -> None:
    p = argparse.ArgumentParser(description="verdicts of two versions of the audit, case by case")
    p.add_argument("--record", help="audit every case and write this JSON")
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two records")
    p.add_argument("--detail", action="store_true", help="with --compare: every comparison and interval")
    p.add_argument("--datasets", default="digits,mnist5k")
    p.add_argument("--methods", default=",".join(METHODS), help="real unlearned models (comma list, '' for none)")
    p.add_argument("--models", default=str(Path(os.environ.get("UNLEARNKIT_CACHE", Path.home() / ".cache" /
                                                             "unlearnkit")) / "verdict-diff"),
                   help="where the methods' models are saved (and reused)")
    a = p.parse_args()
    os.environ.setdefault("UNLEARNKIT_PROGRESS", "0")
    if a.compare:
        sys.exit(compare(a))
    if not a.record:
        p.error("give --record FILE or --compare OLD NEW")
    record(a)


if __name__ == "__main__":
    main()
