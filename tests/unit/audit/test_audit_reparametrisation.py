"""No function-preserving change of a model may move the verdict (issue "The verdict can be fooled").

A model handed to the audit can be the original up to a reparametrisation that leaves every
prediction unchanged: a BatchNorm channel multiplied by c and the next layer divided by c, units
permuted, or a stage's channels mixed by an invertible matrix that the next layer undoes. The
trace-form separability of the old verdict fell 5.98x -> 0.78x under the first (the issue's review) and certified a
masked original ``erased``. Here every number the verdict reads (each comparison's estimate,
interval and p-values, and the resurfacing checks that enter it) and the verdict itself must be
the same for the model and for its rescaled, permuted and mixed copies.
"""
from __future__ import annotations

import pytest
import torch
from audit_helpers import REPARAMETRISATIONS, masked_head, single_thread

from unlearnkit.audit import AuditConfig, audit
from unlearnkit.audit.memo import AuditCache

pytestmark = pytest.mark.heavy  # trains the audit references and runs whole audits: `make test`, not test-fast
CONFIG = AuditConfig(relearn=False)  # relearning is reported only (SGD is not reparametrisation-invariant)


@pytest.fixture(scope="module")
def shared(original, retrain0, audit_split):
    from unlearnkit.evaluation import model_outputs
    from unlearnkit.models.zoo import audit_layers

    layers = audit_layers(original)
    outs = {"original": model_outputs(original, audit_split, layers),
            "retrained": [model_outputs(retrain0, audit_split, layers)]}
    return AuditCache(), outs


@pytest.fixture(scope="module")
def audits(shared):
    return {}


def _audit(key, model, original, retrain0, split, shared, audits):
    if key not in audits:
        cache, outs = shared
        with single_thread():
            audits[key] = audit(original, model, retrain0, split, config=CONFIG, cache=cache, outputs=outs)
    return audits[key]


def _read_by_the_verdict(rep) -> dict:
    nums = {(c.data, c.layer, c.stat): (c.value, c.low, c.high, c.p, c.p_holm) for c in rep.family}
    for name, r in rep.resurfacing.items():
        if r.applicable and r.in_verdict:
            nums[("resurfacing", name)] = (r.forget_acc_after, r.retrain_forget_acc_after)
    return nums


def _assert_same_numbers(a: dict, b: dict, label) -> None:
    """Every number the verdict reads agrees between a model and its reparametrised copy."""
    for k in a:
        if k[0] == "resurfacing":
            # percentages of ~2,600 head re-fit queries (130 forget rows x 20 draws): float32 rounding of a mixed
            # copy's features can flip one query (0.04 points) on another CPU's kernels
            # (ATEN_CPU_CAPABILITY=default measured it); 0.1 points still fails on any real change
            assert b[k] == pytest.approx(a[k], rel=1e-3, abs=0.1), (label, k)
            continue
        # the log ratio, its interval and p-values: float32 rounding of a mixed copy's features, amplified by the
        # whitening on the test data's 37 forget rows in 128 dimensions, moved a log ratio by 0.0075 under
        # ATEN_CPU_CAPABILITY=avx2; it must stay within 5 % of the interval's half-width (a real change of the
        # statistic moves it by far more), the p-values within 0.02
        half = (a[k][2] - a[k][1]) / 2
        assert b[k][:3] == pytest.approx(a[k][:3], abs=max(5e-3, 0.05 * half)), (label, k)
        assert b[k][3:] == pytest.approx(a[k][3:], abs=0.02), (label, k)


@pytest.mark.parametrize("how", sorted(REPARAMETRISATIONS))
# one reference: a genuine retrain is within tolerance everywhere but "inconclusive" (no output membership test)
@pytest.mark.parametrize("case,expected", [("masked", "suppressed"), ("retrain", "inconclusive"),
                                           ("original", "not_forgotten")])
def test_reparametrised_model_reads_the_same_numbers_and_verdict(case, expected, how, original, retrain0,
                                                                 retrain1, audit_split, shared, audits):
    base_model = {"masked": lambda: masked_head(original), "retrain": lambda: retrain1,
                  "original": lambda: original}[case]()
    changed = REPARAMETRISATIONS[how](base_model, seed=7)
    x = torch.cat([xb for xb, _ in audit_split.test.batches(512)])
    with torch.no_grad():
        assert torch.equal(base_model.eval()(x).argmax(1), changed.eval()(x).argmax(1))  # same function
    base = _audit(case, base_model, original, retrain0, audit_split, shared, audits)
    rep = _audit(f"{case}-{how}", changed, original, retrain0, audit_split, shared, audits)
    assert base.verdict == expected, base.summary()
    assert rep.verdict == base.verdict, rep.summary()
    a, b = _read_by_the_verdict(base), _read_by_the_verdict(rep)
    assert a.keys() == b.keys() and len(a) >= 8
    _assert_same_numbers(a, b, how)
    if case == "masked" and how == "rescaled":
        # the statistic the old verdict read is not invariant: it is reported, not decided on
        pen_a, pen_b = base.layer("penultimate"), rep.layer("penultimate")
        assert abs(pen_b.separability / pen_a.separability - 1) > 0.1
        assert pen_b.cka_original == pytest.approx(1.0, abs=1e-4)  # CKA on standardised units


@pytest.fixture(scope="module")
def mnist():
    """mnist5k, class 3: the original and two retrains (about 50 s each to train on 2 cores; the slow
    tier reuses the user's model cache, ``UNLEARNKIT_CACHE`` or ~/.cache/unlearnkit)."""
    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.training import default_recipe, reference_model

    split = make_split(load_dataset("mnist5k"), ForgetSpec(classes=(3,)))
    recipe = default_recipe("mnist5k", "small_cnn")
    with single_thread():
        models = {(k, s): reference_model(k, split, "small_cnn", recipe, seed=s, progress=False).model
                  for k, s in (("original", 0), ("retrain", 0), ("retrain", 1))}
    return split, models


@pytest.mark.slow
# one reference: a genuine retrain is within tolerance everywhere but "inconclusive" (no output membership test)
@pytest.mark.parametrize("case,expected", [("masked", "suppressed"), ("retrain", "inconclusive"),
                                           ("original", "not_forgotten")])
def test_reparametrised_mnist5k_models_read_the_same_numbers_and_verdict(case, expected, mnist):
    split, models = mnist
    original, retrain0 = models[("original", 0)], models[("retrain", 0)]
    model = {"masked": lambda: masked_head(original), "retrain": lambda: models[("retrain", 1)],
             "original": lambda: original}[case]()
    reps = {}
    for how in ("none", *sorted(REPARAMETRISATIONS)):
        m = model if how == "none" else REPARAMETRISATIONS[how](model, seed=11)
        with single_thread():
            reps[how] = audit(original, m, retrain0, split, config=CONFIG)
    assert reps["none"].verdict == expected, reps["none"].summary()
    base = _read_by_the_verdict(reps["none"])
    for how, rep in reps.items():
        assert rep.verdict == expected, (how, rep.summary())
        _assert_same_numbers(base, _read_by_the_verdict(rep), how)
