"""The mean-matched model of issue 28: an adversary's model that keeps the class and tries to read ``erased``.

    .venv/bin/python benchmarks/attack_mean_matched.py --dataset digits --seeds 0,1,2 --references 1,5
    .venv/bin/python benchmarks/attack_mean_matched.py --quick          # seed 0, one reference: a smoke run

Per seed s, small_cnn's original (seed s) and the retrained references (seeds 0..4, class ``--forget-class``
forgotten) come through the project's model cache (``training.reference_model``, as
``audit_error_rates.py`` trains them). The attack fine-tunes a copy of the original (Adam; the retained rows
pass the BatchNorms in train mode, the forget rows in eval mode, and the running statistics end as the
retained data's, so the audit's BatchNorm re-estimation changes nothing: :class:`AttackConfig`) on

    CE(retained rows)  +  CE(forget rows -> their most likely retained class)
    + lambda * sum over every audited layer of ||mean f(forget) - mean f(retained)||^2 / mean ||f(retained)||^2

(pooled features of ``uk.audit_layers``, taken with ``uk.capture``): the output forgets, retained accuracy
is kept, and at every audited layer the forget class's feature mean sits on the retained data's. Then per
seed it reports

(a) forget and retained accuracy (training rows);
(b) the audit's verdict and evidence (``uk.audit``) with 1 reference (retrain seed 0) and with 5 (seeds
    0..4);
(c) that the class is still there: a held-out MLP probe (scikit-learn, one hidden layer of 64, standardised
    penultimate features, forget rows vs retained rows of the training split; ``mlp_probe.probe``: held-out
    log loss over 5 stratified folds) for the attacked model, the original and every retrain;
(d) relearning: plain SGD (lr 0.01, momentum 0.9, eval mode) on all weights of a copy, full batch of 5 forget
    + 5 per retained class, cross-entropy; forget / retained accuracy on every forget / retained training row
    after 1, 2, 5, 10 steps ("div" when the run diverged), for the same models.

Writes ``benchmarks/results/attack_mean_matched.json`` (atomically). :func:`mean_matched` is importable
(``attack_reparam.py`` uses it).
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "attack_mean_matched.json"
RELEARN_STEPS = (1, 2, 5, 10)
MODEL = "small_cnn"


@dataclass(frozen=True)
class AttackConfig:
    """The attack's fine-tuning: Adam (``lr``) for ``epochs`` passes over the retained rows in batches of
    ``batch_retain``, each step with ``batch_forget`` forget rows; ``lam`` weighs the mean-matching term, whose
    target for mean f(forget) - mean f(retained) is ``shift`` times the original's (0: the means equal, the
    issue's attack; a two-sided audit may call that over-forgetting, and an adversary who knows it keeps some
    of the original's separation). With ``bn_retained`` the retained rows pass the BatchNorms in train mode
    (batch statistics; the running ones follow them) and the forget rows in eval mode (the running ones, i.e.
    the retained data's), and the running statistics are set to the retained rows' before and after training,
    so re-estimating them on retained data (the audit's BatchNorm check) changes almost nothing; without it
    the model trains in eval mode and keeps the original's statistics."""

    epochs: int = 30
    lr: float = 3e-4
    lam: float = 10.0
    shift: float = 0.0
    bn_retained: bool = True
    batch_retain: int = 128
    batch_forget: int = 64


def sibling(name: str):
    """The module ``benchmarks/<name>.py`` (benchmarks is not a package), imported once."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cached_model(kind: str, split, seed: int):
    """The cached ``original`` / ``retrain`` small_cnn of ``seed`` (trained once, then read from the cache)."""
    from unlearnkit.training import default_recipe, reference_model

    recipe = default_recipe(split.dataset.name, MODEL)
    return reference_model(kind, split, MODEL, recipe, seed=seed, progress=False).model.eval()


def _matching_loss(fr: dict, ff: dict, target: dict) -> torch.Tensor:
    """sum over layers of ||mean ff - mean fr - target||^2 / mean ||fr||^2."""
    terms = [(ff[k].mean(0) - fr[k].mean(0) - target[k]).pow(2).sum() / fr[k].pow(2).sum(1).mean().clamp_min(1e-12)
             for k in fr]
    return torch.stack(terms).sum()


def _targets(model, split, layers: list[str], shift: float) -> dict:
    """``shift`` x (mean forget feature - mean retained feature) of ``model`` at each layer (zeros when 0)."""
    import unlearnkit as uk

    if shift == 0:
        return {k: torch.zeros(()) for k in layers}
    f = uk.extract(model, split.train_forget, layers)
    r = uk.extract(model, split.train_retain, layers)
    return {k: shift * (f[k].mean(0) - r[k].mean(0)) for k in layers}


@torch.no_grad()
def set_bn_stats(model, data, batch_size: int = 512) -> None:
    """Every BatchNorm's running statistics of ``model`` (in place) re-estimated on all of ``data``
    (cumulative average over batches); the model is left in eval mode."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    momenta = [bn.momentum for bn in bns]
    model.eval()
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
        bn.train()
    for xb, _ in data.batches(batch_size):
        if len(xb) > 1:
            model(xb)
    for bn, momentum in zip(bns, momenta):
        bn.momentum = momentum
    model.eval()


def _forward(model, layers: list[str], x: torch.Tensor, *, train_bn: bool) -> tuple[torch.Tensor, dict]:
    """``(logits, pooled features of layers)`` with the graph; with ``train_bn`` the BatchNorms normalise with
    the batch's statistics and update their running ones, else they use the running ones."""
    import unlearnkit as uk

    for mod in model.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.train(train_bn)
    with uk.capture(model, layers, detach=False) as feats:
        logits = model(x)
    model.eval()
    return logits, dict(feats)


def mean_matched(original, split, *, seed: int = 0, config: AttackConfig = AttackConfig(), log=None):
    """A copy of ``original`` fine-tuned so the output forgets ``split``'s forgotten classes, retained accuracy
    stays, and at every audit layer the forget rows' mean feature equals the retained rows' (module docstring).
    Returns the model, in eval mode."""
    import unlearnkit as uk

    forgotten = list(split.forgotten_classes)
    m = copy.deepcopy(original).eval()
    for p in m.parameters():
        p.requires_grad_(True)
    layers = uk.audit_layers(m)
    target = _targets(original, split, layers, config.shift)
    if config.bn_retained:
        set_bn_stats(m, split.train_retain)
    opt = torch.optim.Adam(m.parameters(), lr=config.lr)
    g = torch.Generator().manual_seed(seed)
    xf_all = split.train_forget.normalize(split.train_forget.x)
    for epoch in range(config.epochs):
        sums = np.zeros(3)
        for xr, yr in split.train_retain.batches(config.batch_retain, shuffle=True, generator=g):
            xf = xf_all[torch.randperm(len(xf_all), generator=g)[: config.batch_forget]]
            lr_, fr = _forward(m, layers, xr, train_bn=config.bn_retained)
            lf, ff = _forward(m, layers, xf, train_bn=False)
            ce_r = F.cross_entropy(lr_, yr)
            masked = lf.detach().clone()
            masked[:, forgotten] = float("-inf")
            ce_f = F.cross_entropy(lf, masked.argmax(1))  # toward the most likely retained class
            match = _matching_loss(fr, ff, target)
            loss = ce_r + ce_f + config.lam * match
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sums += [ce_r.item(), ce_f.item(), match.item()]
        if log is not None and (epoch == 0 or (epoch + 1) % 10 == 0 or epoch + 1 == config.epochs):
            log(f"  attack epoch {epoch + 1}/{config.epochs}: CE retained {sums[0]:.3f}, CE forget->retained "
                f"{sums[1]:.3f}, mean matching {sums[2]:.4f} (sums over the epoch)")
    if config.bn_retained:
        set_bn_stats(m, split.train_retain)
    return m.eval()


def accuracy(model, data, finite: bool = False) -> float | None:
    """Accuracy (%) of ``model`` on ``data`` (an ArrayData, test transform); with ``finite``, None when a
    logit is not finite."""
    import unlearnkit as uk

    if not len(data):
        return float("nan")
    logits = uk.extract(model, data, ["logits"])["logits"]
    if finite and not bool(torch.isfinite(logits).all()):
        return None
    return 100.0 * float((logits.argmax(1) == data.y).float().mean())


def audit_summary(report) -> dict:
    """The verdict, its evidence and the per-layer numbers of the data the verdict rests on (``to_dict``)."""
    d = report.to_dict()
    return {"verdict": d.get("verdict"), "evidence": d.get("evidence", []), "rests_on": d.get("rests_on"),
            "layers": d.get("layers", {}), "resurfacing": d.get("resurfacing", {}), "tests": d.get("tests", {})}


def run_audit(original, model, refs, split) -> dict:
    """``uk.audit`` of ``model`` against ``original`` and ``refs`` on ``split``'s training forget / retain rows
    and its test set; :func:`audit_summary` of the report."""
    import unlearnkit as uk

    rep = uk.audit(original, model, list(refs), forget=split.train_forget, retain=split.train_retain,
                   test=split.test, progress=False)
    return audit_summary(rep)


def penultimate(model, split, layer: str = "penultimate") -> tuple[np.ndarray, np.ndarray]:
    """Penultimate (or ``layer``'s) features of the training rows (forget first) and labels (1 = forget)."""
    import unlearnkit as uk

    f = uk.extract(model, split.train_forget, [layer])[layer].double().numpy()
    r = uk.extract(model, split.train_retain, [layer])[layer].double().numpy()
    return np.concatenate([f, r]), np.concatenate([np.ones(len(f)), np.zeros(len(r))])


def probe_loss(model, split, seed: int) -> dict:
    """Held-out log loss and AUROC of the MLP probe (``mlp_probe.probe``) of forget vs retained rows on
    ``model``'s penultimate features; None when the features are not finite."""
    x, y = penultimate(model, split)
    if not np.isfinite(x).all():
        return {"log_loss": None, "auroc": None, "note": "non-finite features"}
    ll, auc = sibling("mlp_probe").probe(x, y, seed)
    return {"log_loss": ll, "auroc": auc}


def relearn_shots(split, seed: int, k: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """``k`` forget rows and ``k`` rows of each retained class (normalised inputs, labels)."""
    rng = np.random.RandomState(seed)
    parts = []
    for data in (split.train_forget, split.train_retain):
        y = data.y.numpy()
        rows = np.sort(np.concatenate([rng.choice(np.flatnonzero(y == c), min(k, int((y == c).sum())), replace=False)
                                       for c in np.unique(y)]))
        parts.append(data.subset(torch.from_numpy(rows)))
    return (torch.cat([p.normalize(p.x) for p in parts]), torch.cat([p.y for p in parts]))


def relearn_curve(model, split, shots, steps=RELEARN_STEPS, lr: float = 0.01) -> dict[str, list]:
    """Forget and retained accuracy (%, every forget / retained training row) of a copy of ``model`` after each
    number of full-batch SGD steps in ``steps`` (momentum 0.9, eval mode, all weights): ``{"forget": [...],
    "retain": [...]}``, ``"div"`` once the loss, the weights or the logits are not finite."""
    x, y = shots
    m = copy.deepcopy(model).eval()
    for p in m.parameters():
        p.requires_grad_(True)
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
    out, done, diverged = {"forget": [], "retain": []}, 0, False
    for target in steps:
        while done < target and not diverged:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(m(x), y)
            diverged = not bool(torch.isfinite(loss))
            if not diverged:
                loss.backward()
                opt.step()
            done += 1
        diverged = diverged or not all(bool(torch.isfinite(p).all()) for p in m.parameters())
        for part, data in (("forget", split.train_forget), ("retain", split.train_retain)):
            acc = None if diverged else accuracy(m, data, finite=True)
            diverged = diverged or acc is None
            out[part].append("div" if diverged else acc)
    return out


def _fmt(v, spec: str = ".1f") -> str:
    return "-" if v is None else v if isinstance(v, str) else format(v, spec)


def run_seed(split, seed: int, n_refs: list[int], config: AttackConfig, log=print) -> dict:
    """Every measurement of one seed (module docstring), printed as it comes; returns them as a dict."""
    original = cached_model("original", split, seed)
    refs = [cached_model("retrain", split, s) for s in range(max(n_refs))]
    t0 = time.perf_counter()
    attacked = mean_matched(original, split, seed=seed, config=config, log=log)
    row = {"seed": seed, "attack_s": time.perf_counter() - t0}
    models = {"attacked": attacked, "original": original, **{f"retrain s{i}": r for i, r in enumerate(refs)}}
    row["accuracy"] = {name: {"forget": accuracy(m, split.train_forget), "retain": accuracy(m, split.train_retain),
                              "test_retain": accuracy(m, split.test_retain)} for name, m in models.items()}
    a = row["accuracy"]["attacked"]
    log(f"\n== seed {seed}: attacked model: forget acc {a['forget']:.1f}%, retain acc {a['retain']:.1f}%, "
        f"test-retain {a['test_retain']:.1f}% (original {row['accuracy']['original']['retain']:.1f}% retain)")
    row["audit"] = {}
    for k in n_refs:
        t1 = time.perf_counter()
        res = run_audit(original, attacked, refs[:k], split)
        res["seconds"] = time.perf_counter() - t1
        row["audit"][str(k)] = res
        log(f"audit, {k} reference(s): {res['verdict']} ({res['seconds']:.0f} s)")
        for e in res["evidence"]:
            log(f"    - {e}")
    row["probe"] = {name: probe_loss(m, split, seed) for name, m in models.items()}
    shots = relearn_shots(split, seed)
    row["relearn"] = {name: relearn_curve(m, split, shots) for name, m in models.items()}
    log(f"{'model':12s} {'forget':>6s} {'retain':>6s} {'probe log loss':>14s} {'AUROC':>6s} | forget / retain acc "
        f"after " + ", ".join(map(str, RELEARN_STEPS)) + " SGD steps")
    for name in models:
        p, acc, rl = row["probe"][name], row["accuracy"][name], row["relearn"][name]
        log(f"{name:12s} {acc['forget']:6.1f} {acc['retain']:6.1f} {_fmt(p['log_loss'], '.4f'):>14s} "
            f"{_fmt(p['auroc'], '.4f'):>6s} | "
            + "  ".join(f"{_fmt(f, '.0f'):>3s}/{_fmt(r, '.0f'):<3s}" for f, r in zip(rl["forget"], rl["retain"])))
    return row


def write_results(payload: dict, path: Path = RESULTS) -> None:
    """``payload`` as indented JSON at ``path``, written atomically (NaN -> null)."""
    from unlearnkit.audit.report import json_safe
    from unlearnkit.checkpoints import atomic_write_text

    atomic_write_text(path, json.dumps(json_safe(payload), indent=1) + "\n")


def ints(text: str, name: str, low: int = 0) -> list[int]:
    """Whole numbers >= ``low`` separated by commas; a UserError naming ``name`` otherwise."""
    from unlearnkit import UserError

    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        out = []
    if not out or min(out) < low:
        raise UserError(f"{name} must be whole numbers >= {low} separated by commas, got {text!r}")
    return out


def check_common(a) -> None:
    """The options both attack scripts share, checked before any work (a UserError naming the option)."""
    from unlearnkit import UserError, validate

    if not 0 <= a.forget_class <= 9:
        raise UserError(f"--forget-class must be in 0..9, got {a.forget_class}")
    if a.threads < 1:
        raise UserError(f"--threads must be >= 1, got {a.threads}")
    validate.output_file("--out", a.out)


def cli(main_fn, argv) -> int:
    """Run ``main_fn(argv)``; a UserError is one ``error:`` line on stderr and exit code 2."""
    from unlearnkit import UserError

    try:
        return main_fn(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits", choices=["digits", "mnist5k"])
    p.add_argument("--forget-class", type=int, default=3)
    p.add_argument("--seeds", default="0,1,2", help="attack seeds (the original of the same seed)")
    p.add_argument("--references", default="1,5", help="numbers of references (retrain seeds 0..K-1)")
    p.add_argument("--shift", type=float, default=0.0,
                   help="target forget-minus-retained mean, as a multiple of the original's (0: the issue's attack)")
    p.add_argument("--quick", action="store_true", help="seed 0, one reference (a smoke run)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--out", default=str(RESULTS), help="the JSON written")
    a = p.parse_args(argv)
    check_common(a)
    seeds = [0] if a.quick else ints(a.seeds, "--seeds")
    n_refs = [1] if a.quick else ints(a.references, "--references", low=1)
    import unlearnkit as uk
    from unlearnkit.training import versions

    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    split = uk.make_split(uk.load_dataset(a.dataset), uk.ForgetSpec(classes=(a.forget_class,)))
    config = AttackConfig(shift=a.shift)
    rows = [run_seed(split, s, n_refs, config) for s in seeds]
    elapsed = time.perf_counter() - t0
    print(f"\nsummary ({a.dataset}, class {a.forget_class}, {MODEL}, shift {a.shift:g}): verdicts of the "
          f"mean-matched model")
    for k in n_refs:
        verdicts = [r["audit"][str(k)]["verdict"] for r in rows]
        print(f"  {k} reference(s): {', '.join(verdicts)}  ({sum(v == 'erased' for v in verdicts)} of "
              f"{len(verdicts)} erased)")
    print(f"took {elapsed:.0f} s")
    write_results({"dataset": a.dataset, "forget_class": a.forget_class, "model": MODEL, "seeds": seeds,
                   "references": n_refs, "quick": a.quick, "attack": asdict(config), "relearn_steps": RELEARN_STEPS,
                   "cases": rows, "elapsed_s": elapsed, "versions": versions()}, Path(a.out))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(cli(main, None))
