"""From the measurements to one verdict, with the evidence in plain words.

Order of the rules (the first that applies wins):

1. ``collapsed``: retained utility destroyed: train-retain or test-retain accuracy, or the k-NN
   accuracy of the penultimate features on the retained test classes (the geometry), more than
   ``collapse_margin`` points below retrain's.
2. ``not_forgotten``: forget accuracy (training forget set) more than ``not_forgotten_margin``
   points above retrain's, and significantly so (one-sided two-proportion z-test at
   ``confidence``).
3. ``suppressed``: the output forgets, but on the audit data the verdict rests on, some layer
   separates the forget data beyond retrain by more than its tolerance at the chosen confidence:
   the lower end of the ΔLPR interval above ``lpr_margin`` or the lower end of the
   separability-ratio interval above ``separability_margin`` (sample-level forgetting: a
   deviation in either direction); or a resurfacing check brings the forget accuracy back more
   than ``resurface_margin`` points above retrain's.
4. ``inconclusive``: fewer than ``min_forget`` forget samples; or the *positive control* fails:
   the original model, measured the same way, is not itself told apart from retrain at any layer
   (then a model that kept the original representation could not be caught either, so erasure
   cannot be certified); or the unlearned model's interval still reaches the original's level
   where the original is told apart; or the other audit data flags a layer that this one does not.
   The evidence then says roughly how many forget examples would decide.
5. ``erased``: none of the above: within tolerance of retrain everywhere, distinguishable from the
   original's representation where the original is distinguishable from retrain, utility kept.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from scipy import stats

from .config import AuditConfig
from .layers import LayerResult

VERDICTS = ("erased", "suppressed", "collapsed", "not_forgotten", "inconclusive")


@dataclass
class Finding:
    """One layer x statistic comparison against its tolerance."""

    layer: str
    stat: str          # "delta_lpr" | "separability"
    value: float       # unlearned: ΔLPR (points) or F ratio
    low: float
    high: float
    margin: float
    original: float    # the original's value (positive control)
    original_low: float
    original_high: float


@dataclass
class Decision:
    verdict: str
    evidence: list[str] = field(default_factory=list)
    n_forget_needed: int | None = None


def _fmt_pts(x: float) -> str:
    return f"{x:+.1f}"


def _z(confidence: float) -> float:
    return float(stats.norm.ppf(confidence))


def findings(results: list[LayerResult]) -> list[Finding]:
    out = []
    for r in results:
        if not r.probed:
            continue
        d, do = r.delta_lpr, r.delta_lpr_original
        out.append(Finding(r.layer, "delta_lpr", d.value, d.low, d.high, r.lpr_margin,
                           do.value, do.low, do.high))
        s, so = r.separability_ratio, r.separability_ratio_original
        if all(math.isfinite(v) and v > 0 for v in (s.value, s.low, s.high, so.value, so.low, so.high)):
            # separability ratios are compared on the log scale (a ratio margin m is symmetric: m and 1/m)
            out.append(Finding(r.layer, "separability", math.log(s.value), math.log(s.low), math.log(s.high),
                               math.log(r.separability_margin), math.log(so.value), math.log(so.low),
                               math.log(so.high)))
    return out


def exceeds(low: float, high: float, margin: float, two_sided: bool) -> bool:
    """The interval lies beyond the tolerance (above it; for sample-level also below −margin)."""
    return low > margin or (two_sided and high < -margin)


def _describe(f: Finding, r: LayerResult, sample_level: bool) -> str:
    what = "the forget samples" if sample_level else "the forgotten class"
    if f.stat == "delta_lpr":
        d = r.delta_lpr
        core = (f"ΔLPR {_fmt_pts(d.value)} [{_fmt_pts(d.low)}, {_fmt_pts(d.high)}] points over retrain "
                f"(tolerance {r.lpr_margin:.1f})")
    else:
        s = r.separability_ratio
        core = (f"separability {s.value:.2f}x retrain's [{s.low:.2f}, {s.high:.2f}] "
                f"(tolerance {r.separability_margin:.2f}x)")
    direction = "still separates" if f.low > 0 else "separates less than retrain:"
    return f"{r.layer} {direction} {what}: {core}, CKA to original {r.cka_original:.3f}"


def _needed(n: int, half: float, gap: float) -> int | None:
    """Rough forget-set size for an interval of half-width ``half`` (at n) to shrink below ``gap``."""
    if not (math.isfinite(half) and half > 0 and math.isfinite(gap) and gap > 0 and n > 0):
        return None
    return int(math.ceil(n * (half / gap) ** 2))


def decide(out_u: dict, out_r: dict, knn_u: dict, knn_r: dict, results: dict[str, list[LayerResult]],
           rests_on: str, n_forget: dict[str, int], sample_level: bool, resurfacing: dict,
           n_train_forget: int, config: AuditConfig) -> Decision:
    """Apply the rules of the module docstring. ``out_*`` are output metrics (retrain: mean of refs)."""
    ev: list[str] = []
    # 1. collapsed -------------------------------------------------------------------------------
    drops = {
        "retain accuracy": out_r["retain_acc"] - out_u["retain_acc"],
        "test-retain accuracy": out_r["test_retain_acc"] - out_u["test_retain_acc"],
        "k-NN test-retain accuracy (penultimate features)": _sub(knn_r.get("test_retain"),
                                                                 knn_u.get("test_retain")),
    }
    worst = [(k, v) for k, v in drops.items()
             if v is not None and math.isfinite(v) and v > config.collapse_margin]
    if worst:
        for k, v in worst:
            ev.append(f"{k} is {v:.1f} points below retrain's (collapse margin {config.collapse_margin:g}): "
                      f"{_val(out_u, knn_u, k):.1f} vs {_val(out_r, knn_r, k):.1f}")
        return Decision("collapsed", ev)
    # 2. not forgotten ---------------------------------------------------------------------------------
    fu, fr = out_u["forget_acc"], out_r["forget_acc"]
    excess = fu - fr
    pu, pr = fu / 100.0, fr / 100.0
    n_f = max(n_train_forget, 1)
    se = math.sqrt(max(pu * (1 - pu), 0.0) / n_f + max(pr * (1 - pr), 0.0) / n_f)
    significant = se == 0.0 or (pu - pr) / se > _z(config.confidence)
    if excess > config.not_forgotten_margin and significant:
        ev.append(f"forget accuracy {fu:.1f}% vs retrain's {fr:.1f}% (+{excess:.1f} points, margin "
                  f"{config.not_forgotten_margin:g}): the model still predicts the forget set")
        return Decision("not_forgotten", ev)
    ev.append(f"output forgets like retrain: forget accuracy {fu:.1f}% vs retrain's {fr:.1f}%, test-retain "
              f"accuracy {out_u['test_retain_acc']:.1f}% vs {out_r['test_retain_acc']:.1f}%")
    # 3. suppressed: representation beyond tolerance, or resurfacing -------------------------------
    main = results[rests_on]
    by_layer = {r.layer: r for r in main}
    fs = findings(main)
    flagged = [f for f in fs if exceeds(f.low, f.high, f.margin, sample_level)]
    resurfaced = [r for r in resurfacing.values() if r.applicable and r.resurfaced]
    if flagged or resurfaced:
        for f in flagged:
            ev.append(_describe(f, by_layer[f.layer], sample_level))
        for r in resurfaced:
            ev.append(_resurface_line(r))
        return Decision("suppressed", ev)
    # 4. inconclusive ----------------------------------------------------------------------------------
    n = n_forget[rests_on]
    control = [f for f in fs if exceeds(f.original_low, f.original_high, f.margin, sample_level)]
    if n < config.min_forget:
        need = _need_from(main, n, config)
        tail = (f"; roughly {need} would be needed ({_need_why(main, n)})" if need else
                f"; at least {config.min_forget} are needed to fit a probe at all")
        ev.append(f"only {n} forget samples on the {rests_on} data (min_forget={config.min_forget}): "
                  f"too few to certify anything{tail}")
        return Decision("inconclusive", ev, need or config.min_forget)
    if not control:
        need = _need_from(main, n, config)
        within = all(abs(f.original) <= f.margin for f in fs)
        tail = (" Even the original's point estimates are within tolerance: more data may only confirm that "
                "the forget set left no trace the audit can see" if within else "")
        ev.append(f"positive control failed: the original model itself is not told apart from retrain at any "
                  f"layer on the {rests_on} data ({n} forget samples), so a model that kept the original "
                  f"representation could not be caught either, and erasure cannot be certified"
                  + (f"; roughly {need} forget samples would be needed ({_need_why(main, n)})."
                     if need else ".") + tail)
        return Decision("inconclusive", ev, need)
    separated = [f for f in control if _clear_of_original(f, sample_level)]
    if not separated:
        f = control[0]
        half = (f.high - f.low) / 2
        gap = abs(f.original - f.value) / 2
        need = _needed(n, half, gap if gap > 0 else float("nan"))
        layers = ", ".join(sorted({c.layer for c in control}))
        ev.append(f"within tolerance of retrain, but the interval still reaches the original's level at "
                  f"{layers}: cannot tell it from a model that kept the original representation"
                  + (f"; roughly {need} forget samples would decide" if need else ""))
        return Decision("inconclusive", ev, need)
    other = [k for k in results if k != rests_on]
    for name in other:
        o_flag = [f for f in findings(results[name]) if exceeds(f.low, f.high, f.margin, sample_level)]
        if o_flag:
            o_layers = {r.layer: r for r in results[name]}
            ev.append(f"the {rests_on} data shows no excess, but the {name} data does:")
            ev.extend("  " + _describe(f, o_layers[f.layer], sample_level) for f in o_flag)
            return Decision("inconclusive", ev)
    # 5. erased ---------------------------------------------------------------------------------------
    best = max(separated, key=lambda f: abs(f.original - f.value))
    r = by_layer[best.layer]
    ev.append(f"every layer is within tolerance of retrain on the {rests_on} data ({n} forget samples); "
              f"e.g. {_plain(best, r)}")
    return Decision("erased", ev)


def _clear_of_original(f: Finding, sample_level: bool) -> bool:
    """The unlearned model's interval excludes the original's point estimate (on the retrain side)."""
    if f.original >= 0 or not sample_level:
        return f.high < f.original
    return f.low > f.original


def _deepest_probed(results: list[LayerResult]) -> LayerResult | None:
    for r in reversed(results):
        d = r.delta_lpr_original
        if r.probed and d is not None and math.isfinite(d.high - d.low) and d.high > d.low:
            return r
    return None


def _need_from(results: list[LayerResult], n: int, config: AuditConfig) -> int | None:
    """Rough forget-set size for the original's ΔLPR interval at the deepest layer to shrink to its
    tolerance (intervals narrow as 1/sqrt(n)); None when no layer could be probed."""
    r = _deepest_probed(results)
    if r is None:
        return None
    need = _needed(n, (r.delta_lpr_original.high - r.delta_lpr_original.low) / 2, r.lpr_margin)
    return max(need, config.min_forget) if need else None


def _need_why(results: list[LayerResult], n: int) -> str:
    r = _deepest_probed(results)
    half = (r.delta_lpr_original.high - r.delta_lpr_original.low) / 2
    return (f"to shrink the ΔLPR interval at {r.layer} from ±{half:.1f} points at {n} samples to its "
            f"±{r.lpr_margin:.1f}-point tolerance; intervals narrow as 1/sqrt(n)")


def _plain(f: Finding, r: LayerResult) -> str:
    if f.stat == "delta_lpr":
        d = r.delta_lpr
        return (f"{r.layer}: ΔLPR {_fmt_pts(d.value)} [{_fmt_pts(d.low)}, {_fmt_pts(d.high)}] where the "
                f"original shows {_fmt_pts(r.delta_lpr_original.value)}, CKA to retrain {r.cka_retrain:.3f}")
    return (f"{r.layer}: separability {r.separability_ratio.value:.2f}x retrain's "
            f"[{r.separability_ratio.low:.2f}, {r.separability_ratio.high:.2f}] where the original shows "
            f"{r.separability_ratio_original.value:.2f}x, CKA to retrain {r.cka_retrain:.3f}")


def _resurface_line(r) -> str:
    what = {"bn_recalibration": "re-estimating BatchNorm statistics on retained data",
            "relearn": "a few SGD steps on a handful of forget examples"}.get(r.name, r.name)
    return (f"the forgotten data resurface after {what}: forget accuracy {r.forget_acc_before:.1f}% -> "
            f"{r.forget_acc_after:.1f}% (retrain under the same: {r.retrain_forget_acc_after:.1f}%)")


def _sub(a, b):
    if a is None or b is None:
        return None
    return a - b


def _val(out: dict, knn: dict, key: str) -> float:
    if key.startswith("k-NN"):
        return knn.get("test_retain", math.nan)
    return out["retain_acc" if key == "retain accuracy" else "test_retain_acc"]
