"""Function-preserving copies of constructed models (issue 28): their verdicts must not move.

    .venv/bin/python benchmarks/attack_reparam.py --dataset digits --references 1,5
    .venv/bin/python benchmarks/attack_reparam.py --quick          # one reference: a smoke run

small_cnn's original (``--seed``, default 0) and retrained references (seeds 0..4) come through the model
cache. Three models are copied:

(a) the output-masked original (``unlearnkit.audit.constructed.masked_head``: the forget class's head row
    zeroed, its bias -1e4; every other logit the original's);
(b) a genuine retrain of another seed (5: none of the references);
(c) the mean-matched model of ``attack_mean_matched.py`` (attack seed ``--seed``; ``--no-mean-matched``
    leaves it out).

Each gets copies that compute the same function, every change compensated exactly in the next layer:

* ``scale100@penultimate``: each unit of ``fc1`` (Linear, then ReLU) times 2^e, e uniform in -100..100 (weights
  row and bias; powers of two are exact in float32), the classifier's input column times 2^-e;
* ``scale120@penultimate``: the same with e in -120..120, near float32's range (some weights of the next
  layer become subnormal: the logits may then differ in the last bits);
* ``scale100@block3``: each channel of ``block3``'s BatchNorm (weight and bias; a conv's output scaled before a
  BatchNorm would be normalised away), then ReLU and average pooling, times 2^e; ``fc1``'s input column
  times 2^-e;
* ``permute``: a random permutation of ``block3``'s channels (conv output channels, BatchNorm parameters and
  running statistics, ``fc1``'s input columns) and of ``fc1``'s units (the classifier's columns);
* ``compose``: ``block2``'s BatchNorm channels scaled by 2^e (e in -100..100; ``block3``'s conv input channels
  by 2^-e), the ``permute`` copy's permutations, and ``fc1``'s units scaled by 2^e (e in -100..100).

For each copy it checks the logits against the model's on every training and test row (max absolute
difference, bit-identical or not) and that every audit layer's features and the logits stay finite; then it
audits the model and its copies with ``uk.audit`` (1 and 5 references) and prints whether each copy's verdict
and penultimate separability ratio (with its interval) equal the uncopied model's, and the largest relative
change of any ``*ratio*`` number the report holds at any layer. Writes ``benchmarks/results/attack_reparam.json``.
"""
from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "attack_reparam.json"
SAME_REL = 1e-3  # a statistic "unchanged": relative difference at most this


def _attack():
    """``attack_mean_matched`` (the sibling script), imported by path."""
    import importlib.util

    if "attack_mean_matched" not in sys.modules:
        spec = importlib.util.spec_from_file_location("attack_mean_matched", HERE / "attack_mean_matched.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["attack_mean_matched"] = module
        spec.loader.exec_module(module)
    return sys.modules["attack_mean_matched"]


# ---------------------------------------------------------------------------------------------
# function-preserving edits (in place, on a copy); each returns nothing


def powers_of_two(n: int, bound: int, g: torch.Generator) -> torch.Tensor:
    """``n`` factors 2^e, e uniform in -bound..bound (float32, exact)."""
    e = torch.randint(-bound, bound + 1, (n,), generator=g)
    return torch.pow(torch.tensor(2.0, dtype=torch.float64), e.double()).float()


@torch.no_grad()
def exact_powers(s: torch.Tensor, incoming: torch.Tensor, outgoing: torch.Tensor) -> torch.Tensor:
    """``s`` (powers of two, one per unit) with each unit's exponent moved toward 0 just enough that every
    nonzero value it touches stays a normal float32 (≥ 2^-126, ≤ 2^126): ``incoming`` (units x ...) is multiplied
    by it, ``outgoing`` (units on dimension 1) divided; the copy is then exact, bit for bit, in its parameters."""
    def span(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = t.detach().double().abs().reshape(t.shape[0], -1)
        lo = torch.where(a > 0, a, math.inf).amin(1)
        return torch.where(torch.isfinite(lo), lo, 1.0), a.amax(1).clamp_min(2.0 ** -126)

    lo_in, hi_in = span(incoming)
    lo_out, hi_out = span(outgoing.transpose(0, 1))
    e_low = torch.ceil(torch.log2(torch.maximum(2.0 ** -126 / lo_in, hi_out / 2.0 ** 126)))
    e_high = torch.floor(torch.log2(torch.minimum(2.0 ** 126 / hi_in, lo_out / 2.0 ** -126)))
    e = torch.log2(s.double()).clamp(min=e_low, max=e_high)
    return torch.pow(torch.tensor(2.0, dtype=torch.float64), e).float()


def _linear_in(layer: nn.Linear) -> torch.Tensor:
    return torch.cat([layer.weight, layer.bias[:, None]], 1)


@torch.no_grad()
def scale_linear_units(unit: nn.Linear, nxt: nn.Linear, s: torch.Tensor) -> None:
    """Units of ``unit`` (followed by ReLU) times ``s`` > 0; ``nxt``'s input columns divided by ``s``."""
    unit.weight.mul_(s[:, None])
    unit.bias.mul_(s)
    nxt.weight.div_(s[None, :])


@torch.no_grad()
def scale_bn_channels(bn: nn.BatchNorm2d, nxt: nn.Module, s: torch.Tensor) -> None:
    """Channels of ``bn`` (followed by ReLU and pooling) times ``s`` > 0 (its affine weight and bias: the
    running statistics stay); ``nxt`` (a Conv2d or a Linear after pooling) divides its input channels by ``s``."""
    bn.weight.mul_(s)
    bn.bias.mul_(s)
    nxt.weight.div_(s.view(1, -1, *([1] * (nxt.weight.dim() - 2))))


@torch.no_grad()
def permute_linear_units(unit: nn.Linear, nxt: nn.Linear, perm: torch.Tensor) -> None:
    """Units of ``unit`` reordered by ``perm``, ``nxt``'s input columns likewise."""
    unit.weight.copy_(unit.weight[perm])
    unit.bias.copy_(unit.bias[perm])
    nxt.weight.copy_(nxt.weight[:, perm])


@torch.no_grad()
def permute_conv_channels(conv: nn.Conv2d, bn: nn.BatchNorm2d, nxt: nn.Module, perm: torch.Tensor) -> None:
    """Output channels of ``conv`` (and its BatchNorm's parameters and running statistics) reordered by
    ``perm``; ``nxt``'s input channels likewise."""
    conv.weight.copy_(conv.weight[perm])
    if conv.bias is not None:
        conv.bias.copy_(conv.bias[perm])
    for t in (bn.weight, bn.bias, bn.running_mean, bn.running_var):
        t.copy_(t[perm])
    nxt.weight.copy_(nxt.weight[:, perm])


def _parts(m: nn.Module) -> dict[str, nn.Module]:
    """small_cnn's modules the edits touch (``models/zoo.py::SmallCNN``)."""
    return {"bn2": m.block2[1], "conv3": m.block3[0], "bn3": m.block3[1], "fc1": m.fc1[0], "fc": m.fc}


def copies(model: nn.Module, seed: int, exact: bool = False) -> dict[str, nn.Module]:
    """The function-preserving copies of ``model`` (a small_cnn) named in the module docstring. ``exact``: every
    exponent moved toward 0 where a value would leave float32's normal range (:func:`exact_powers`), so that no
    weight is rounded (the attack suite's copies: a subnormal weight's lost bits, amplified by 40 relearning steps,
    moved a deciding number by 2.6 %)."""
    p = _parts(model)
    n3, n1 = p["bn3"].num_features, p["fc1"].out_features
    g = torch.Generator().manual_seed(seed)
    out = {}

    def new() -> tuple[nn.Module, dict]:
        m = copy.deepcopy(model).eval()
        return m, _parts(m)

    def lin(q: dict, bound: int) -> torch.Tensor:
        s = powers_of_two(n1, bound, g)
        return exact_powers(s, _linear_in(q["fc1"]), q["fc"].weight) if exact else s

    def bn(q: dict, name: str, nxt: str, bound: int) -> torch.Tensor:
        s = powers_of_two(q[name].num_features, bound, g)
        affine = torch.stack([q[name].weight, q[name].bias], 1)
        return exact_powers(s, affine, q[nxt].weight.reshape(q[nxt].weight.shape[0], s.numel(), -1)) if exact else s

    m, q = new()
    scale_linear_units(q["fc1"], q["fc"], lin(q, 100))
    out["scale100@penultimate"] = m
    m, q = new()
    scale_linear_units(q["fc1"], q["fc"], lin(q, 120))
    out["scale120@penultimate"] = m
    m, q = new()
    scale_bn_channels(q["bn3"], q["fc1"], bn(q, "bn3", "fc1", 100))
    out["scale100@block3"] = m
    perm3, perm1 = torch.randperm(n3, generator=g), torch.randperm(n1, generator=g)
    m, q = new()
    permute_conv_channels(q["conv3"], q["bn3"], q["fc1"], perm3)
    permute_linear_units(q["fc1"], q["fc"], perm1)
    out["permute"] = m
    m, q = new()
    scale_bn_channels(q["bn2"], q["conv3"], bn(q, "bn2", "conv3", 100))
    permute_conv_channels(q["conv3"], q["bn3"], q["fc1"], perm3)
    permute_linear_units(q["fc1"], q["fc"], perm1)
    scale_linear_units(q["fc1"], q["fc"], lin(q, 100))
    out["compose"] = m
    return out


# ---------------------------------------------------------------------------------------------
# checks


def outputs(model: nn.Module, split) -> dict[str, torch.Tensor]:
    """Every audit layer's pooled features and the logits on the training and test rows (one pass each)."""
    import unlearnkit as uk

    layers = [*uk.audit_layers(model), "logits"]
    parts = [uk.extract(model, d, layers) for d in (split.train_forget, split.train_retain, split.test)]
    return {k: torch.cat([p[k] for p in parts]) for k in layers}


def function_check(base: dict[str, torch.Tensor], model: nn.Module, split) -> dict:
    """How far ``model``'s logits are from ``base``'s (max |difference|, bit-identical) and which of its layers'
    features (or logits) are not finite."""
    got = outputs(model, split)
    diff = (got["logits"] - base["logits"]).abs().max().item()
    return {"max_abs_logit_diff": diff, "bit_identical": bool(torch.equal(got["logits"], base["logits"])),
            "non_finite": [k for k, v in got.items() if not bool(torch.isfinite(v).all())],
            "largest_feature": {k: v.abs().max().item() for k, v in got.items()}}


def _ratios(summary: dict) -> dict[str, float | None]:
    """Every ``*ratio*`` number of every layer (but the original's), keyed ``layer.key`` (intervals' ends too)."""
    out = {}
    for layer, d in summary["layers"].items():
        for k, v in d.items():
            if "ratio" not in k or "original" in k:
                continue
            vals = v if isinstance(v, list) else [v]
            for i, x in enumerate(vals):
                if x is None or isinstance(x, (int, float)):
                    out[f"{layer}.{k}" + (f"[{i}]" if isinstance(v, list) else "")] = x
    return out


def _rel(a, b) -> float:
    if a is None or b is None:
        return 0.0 if a is None and b is None else math.inf
    return abs(a - b) / max(abs(b), 1e-12)


def compare(copy_summary: dict, base_summary: dict) -> dict:
    """The copy's verdict and penultimate separability ratio against the uncopied model's."""
    pen_c = copy_summary["layers"].get("penultimate", {})
    pen_b = base_summary["layers"].get("penultimate", {})
    rc, rb = _ratios(copy_summary), _ratios(base_summary)
    changes = {k: _rel(rc.get(k), rb.get(k)) for k in set(rc) | set(rb)}
    worst = max(changes, key=changes.get) if changes else None
    sep = [_rel(pen_c.get("separability_ratio"), pen_b.get("separability_ratio"))]
    sep += [_rel(x, y) for x, y in zip(pen_c.get("separability_ratio_ci") or [None, None],
                                       pen_b.get("separability_ratio_ci") or [None, None])]
    return {"same_verdict": copy_summary["verdict"] == base_summary["verdict"],
            "penultimate_sep_rel_change": max(sep), "same_penultimate_sep": max(sep) <= SAME_REL,
            "max_ratio_rel_change": changes.get(worst) if worst else None, "worst_ratio": worst}


def _sep(summary: dict) -> str:
    d = summary["layers"].get("penultimate", {})
    v, ci = d.get("separability_ratio"), d.get("separability_ratio_ci") or [None, None]
    return f"{_num(v)} [{_num(ci[0])}, {_num(ci[1])}]"


def _num(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def audit_all(original, models: dict[str, nn.Module], refs, split) -> dict[str, dict]:
    """``uk.audit`` of every model (one call: the references are passed over once) -> name: summary."""
    import unlearnkit as uk

    reports = uk.audit(original, list(models.values()), list(refs), forget=split.train_forget,
                       retain=split.train_retain, test=split.test, progress=False)
    summary = _attack().audit_summary
    return {name: summary(r) for name, r in zip(models, reports)}


def run_model(name: str, model: nn.Module, original, refs, split, n_refs: list[int], seed: int) -> dict:
    """Copies of ``model``, their function checks and audits (module docstring), printed as they come."""
    base_out = outputs(model, split)
    variants = copies(model, seed)
    row = {"function": {k: function_check(base_out, m, split) for k, m in variants.items()}, "audits": {}}
    for k in n_refs:
        t0 = time.perf_counter()
        summaries = audit_all(original, {"(uncopied)": model, **variants}, refs[:k], split)
        base = summaries["(uncopied)"]
        row["audits"][str(k)] = {"seconds": time.perf_counter() - t0, "uncopied": base,
                                 "copies": {c: {"summary": s, **compare(s, base)} for c, s in summaries.items()
                                            if c != "(uncopied)"}}
        print(f"\n== {name}, {k} reference(s) ({time.perf_counter() - t0:.0f} s for {len(summaries)} audits)")
        print(f"{'copy':22s} {'max|dlogit|':>11s} {'bits':>4s} {'finite':>6s} {'verdict':14s} "
              f"{'penultimate sep. ratio [CI]':30s} {'same':>4s} {'max rel change of any ratio':>28s}")
        print(f"{'(uncopied)':22s} {'':>11s} {'':>4s} {'':>6s} {base['verdict']:14s} {_sep(base):30s}")
        for c, res in row["audits"][str(k)]["copies"].items():
            fc = row["function"][c]
            same = "yes" if res["same_verdict"] and res["same_penultimate_sep"] else "NO"
            fin = "yes" if not fc["non_finite"] else "NO:" + ",".join(fc["non_finite"])
            worst = "-" if res["max_ratio_rel_change"] is None else \
                f"{res['max_ratio_rel_change']:.2g} ({res['worst_ratio']})"
            print(f"{c:22s} {fc['max_abs_logit_diff']:11.3g} {'=' if fc['bit_identical'] else '~':>4s} {fin:>6s} "
                  f"{res['summary']['verdict']:14s} {_sep(res['summary']):30s} {same:>4s} {worst:>28s}")
            if not res["same_verdict"]:
                for e in res["summary"]["evidence"]:
                    print(f"    - {e}")
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits", choices=["digits", "mnist5k"])
    p.add_argument("--forget-class", type=int, default=3)
    p.add_argument("--seed", type=int, default=0, help="the original's seed, the mean-matched attack's, the copies'")
    p.add_argument("--references", default="1,5", help="numbers of references (retrain seeds 0..K-1)")
    p.add_argument("--no-mean-matched", action="store_true", help="leave the mean-matched model out")
    p.add_argument("--quick", action="store_true", help="one reference (a smoke run)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--out", default=str(RESULTS), help="the JSON written")
    a = p.parse_args(argv)
    atk = _attack()
    atk.check_common(a)
    if a.seed < 0:
        from unlearnkit import UserError

        raise UserError(f"--seed must be >= 0, got {a.seed}")
    n_refs = [1] if a.quick else atk.ints(a.references, "--references", low=1)
    import unlearnkit as uk
    from unlearnkit.audit.constructed import masked_head
    from unlearnkit.training import versions

    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    split = uk.make_split(uk.load_dataset(a.dataset), uk.ForgetSpec(classes=(a.forget_class,)))
    original = atk.cached_model("original", split, a.seed)
    refs = [atk.cached_model("retrain", split, s) for s in range(max(n_refs))]
    models = {"masked original": masked_head(original, (a.forget_class,)),
              "retrain s5": atk.cached_model("retrain", split, 5)}
    if not a.no_mean_matched:
        models["mean-matched"] = atk.mean_matched(original, split, seed=a.seed)
    rows = {name: run_model(name, m, original, refs, split, n_refs, a.seed) for name, m in models.items()}
    elapsed = time.perf_counter() - t0
    moved = [(name, k, c) for name, r in rows.items() for k, au in r["audits"].items()
             for c, res in au["copies"].items() if not (res["same_verdict"] and res["same_penultimate_sep"])]
    print(f"\n{a.dataset}, class {a.forget_class}: {len(moved)} copies whose verdict or penultimate separability "
          f"moved" + "".join(f"\n  {n}, {k} reference(s): {c}" for n, k, c in moved))
    print(f"took {elapsed:.0f} s")
    atk.write_results({"dataset": a.dataset, "forget_class": a.forget_class, "model": atk.MODEL, "seed": a.seed,
                       "references": n_refs, "quick": a.quick, "same_rel": SAME_REL, "models": rows,
                       "moved": [list(m) for m in moved], "elapsed_s": elapsed, "versions": versions()}, Path(a.out))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(_attack().cli(main, None))
