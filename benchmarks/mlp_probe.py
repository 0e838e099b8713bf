"""A non-linear check the audit's rules do not read: an MLP probe of the forgotten class, layer by layer.

    python benchmarks/mlp_probe.py --dataset digits --methods deep_reset,conv_transpose,salun --seeds 0,1,2

The audit decides on a linear statistic (the Mahalanobis separability ratio). A method could in principle
hide the forgotten class from linear read-outs while a non-linear one still finds it; this script looks.
Per seed it takes the cached original and retrained small CNN (class ``--forget-class`` forgotten, the
default recipe, as ``unlearnkit run`` trains them), runs each method from the original with its ``small``
preset and that seed, and at every audit layer fits an MLP (scikit-learn ``MLPClassifier``, one hidden
layer of 64 ReLU units, L2 1e-3, StandardScaler) to tell the training forget rows from (at most
``--max-retain``) training retain rows, with 5-fold stratified cross-validation. It prints the held-out
log loss of the probe (lower = the class is easier to find) as a ratio over retrain's
(``logloss_retrain / logloss_model``: 1 = as hidden as in retrain, > 1 = easier to find than in retrain)
and the held-out AUROC, for the original (the positive control), retrain of another seed (seed + 100:
what a correct method may show), and every method; mean ± the 95 % Student-t half-width over seeds.
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import torch


def probe(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[float, float]:
    """Held-out (5-fold) log loss and AUROC of an MLP probe of ``y`` on ``x``."""
    from sklearn.metrics import log_loss, roc_auc_score
    from sklearn.model_selection import StratifiedKFold
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    p = np.zeros(len(y))
    for train, test in StratifiedKFold(5, shuffle=True, random_state=seed).split(x, y):
        clf = make_pipeline(StandardScaler(), MLPClassifier((64,), alpha=1e-3, max_iter=300, random_state=seed))
        clf.fit(x[train], y[train])
        p[test] = clf.predict_proba(x[test])[:, 1]
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(log_loss(y, p)), float(roc_auc_score(y, p))


def probe_batched(x: np.ndarray, y: np.ndarray, seeds: list[int], **kw) -> list[float]:
    """Held-out (5-fold) log loss per seed of the probe of :func:`probe`, its 5 × len(seeds) fits trained together:
    :func:`unlearnkit.metrics.mlp_probe.heldout_log_loss`, the audit's own copy (its docstring says where it differs
    from scikit-learn's; ``benchmarks/mlp_probe_cost.py`` measures how they agree). Until 2026-12-08 this was a copy
    of it here without the audit's feature preparation (dead units by each unit's own scale, a canonical unit order):
    the committed results read before then came from that copy."""
    from unlearnkit.metrics.mlp_probe import heldout_log_loss

    return heldout_log_loss(x, y, seeds, **kw)


def features(model, split, layers, max_retain: int, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from unlearnkit.evaluation import model_outputs

    out = model_outputs(model, split, layers)
    rng = np.random.default_rng(seed)
    n_r = len(split.train_retain)
    keep = np.sort(rng.choice(n_r, size=min(n_r, max_retain), replace=False))
    res = {}
    for layer in layers:
        f = out["train_forget"][layer].double().numpy()
        r = out["train_retain"][layer].double().numpy()[keep]
        res[layer] = (np.concatenate([f, r]), np.concatenate([np.ones(len(f)), np.zeros(len(r))]))
    return res


def mean_h(values: list[float]) -> str:
    from scipy import stats

    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return f"{v.mean():.2f}"
    h = stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
    return f"{v.mean():.2f} ± {h:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--forget-class", type=int, default=3)
    ap.add_argument("--methods", default="deep_reset")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--max-retain", type=int, default=1000)
    a = ap.parse_args()

    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.methods import METHODS
    from unlearnkit.models.zoo import audit_layers
    from unlearnkit.training import default_recipe, reference_model

    torch.manual_seed(0)
    split = make_split(load_dataset(a.dataset), ForgetSpec(classes=(a.forget_class,)))
    recipe = default_recipe(a.dataset, "small_cnn")
    seeds = [int(s) for s in a.seeds.split(",")]
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    rows: dict[str, dict[str, list[tuple[float, float]]]] = {}
    layers: list[str] = []
    for s in seeds:
        def ref(kind, seed):
            return reference_model(kind, split, "small_cnn", recipe, seed=seed, progress=False).model

        original, retrain, other = ref("original", s), ref("retrain", s), ref("retrain", s + 100)
        layers = audit_layers(original)
        base = features(retrain, split, layers, a.max_retain, s)
        base_probe = {layer: probe(*base[layer], s) for layer in layers}
        models = {"original": original, "retrain, another seed": other}
        for name in methods:
            m = METHODS.get(name).from_preset("small", a.dataset)
            models[name] = m.unlearn(original, split, original=original, seed=s).model
        for name, model in models.items():
            feats = features(model, split, layers, a.max_retain, s)
            for layer in layers:
                ll, auc = probe(*feats[layer], s)
                rows.setdefault(name, {}).setdefault(layer, []).append((base_probe[layer][0] / ll, auc))
        print(f"seed {s} done", flush=True)
    name_w = max(len(n) for n in rows) + 2
    print(f"\n{a.dataset}, class {a.forget_class} forgotten, small_cnn, seeds {a.seeds}: MLP probe of forget vs "
          f"retain rows (train split), held-out 5-fold")
    print("log-loss ratio retrain / model (1 = as hidden as in retrain; > 1 = easier to find) | AUROC")
    print("model".ljust(name_w) + " | ".join(f"{layer:>24s}" for layer in layers))
    for name, per in rows.items():
        cells = [f"{mean_h([r for r, _ in per[layer]]):>13s} {mean_h([c for _, c in per[layer]]):>10s}"
                 for layer in layers]
        print(name.ljust(name_w) + " | ".join(cells))


if __name__ == "__main__":
    main()
