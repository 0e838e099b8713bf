"""Adaptive resplitting of the audit's reported intervals (ΔAUROC, ΔLPR): the looks and their confidence,
the stopping rule, the pairing of every model on the same resplits, and the coverage it keeps."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from scipy import stats

from unlearnkit import runtime
from unlearnkit.audit import AuditConfig
from unlearnkit.audit.layers import _Model, resplit
from unlearnkit.audit.probing import ProbeScores, clear_of, look_confidence, looks, make_splits, paired_interval


def test_looks_and_their_confidence_by_hand():
    # n_splits 10: looks at 5 and 10 resplits, each at 1 - 0.05 / 2; Bonferroni: 2 x 0.05 / 2 = 0.05
    assert looks(AuditConfig()) == (5,)  # the default (n_splits 5): one look, the fixed design
    cfg = AuditConfig(n_splits=10)
    assert looks(cfg) == (5, 10)
    assert look_confidence(cfg) == pytest.approx(1 - 0.05 / 2)
    assert looks(AuditConfig(n_splits=20)) == (5, 10, 20)
    assert look_confidence(AuditConfig(n_splits=20)) == pytest.approx(1 - 0.05 / 3)
    assert len(looks(cfg)) * (1 - look_confidence(cfg)) == pytest.approx(1 - cfg.confidence)
    # the maximum is n_splits; looks at or above it are dropped; one look is the fixed design at 95 %
    assert looks(AuditConfig(n_splits=10)) == (5, 10) and look_confidence(AuditConfig(n_splits=10)) == 0.975
    assert looks(AuditConfig(n_splits=5)) == (5,) and look_confidence(AuditConfig(n_splits=5)) == 0.95
    assert looks(AuditConfig(resplit_looks=())) == (5,) and looks(AuditConfig(n_splits=10, resplit_looks=())) == (10,)
    assert looks(AuditConfig(n_splits=12, resplit_looks=(3, 6))) == (3, 6, 12)
    for bad in [(5, 5), (10, 5), (1, 10)]:
        with pytest.raises(Exception, match="resplit_looks"):
            AuditConfig(resplit_looks=bad)


def test_a_looks_interval_is_the_corrected_t_at_the_looks_level():
    cfg = AuditConfig(n_splits=20)  # three looks
    y = np.r_[np.ones(30, bool), np.zeros(70, bool)]
    splits = make_splits(y, cfg)[:5]
    d = np.array([1.0, 2.0, 0.5, 1.5, 3.0])
    mean, lo, hi, se = paired_interval(d, splits, y.size, cfg, look_confidence(cfg))
    # by hand: sd * sqrt(1/J + n_test/n_train), t quantile at 1 - 0.05/3/2 with J - 1 = 4 df
    se_hand = d.std(ddof=1) * np.sqrt(1 / 5 + 30 / 70)
    half = stats.t.ppf(1 - 0.05 / 6, 4) * se_hand
    assert mean == pytest.approx(1.6) and se == pytest.approx(se_hand)
    assert (lo, hi) == pytest.approx((1.6 - half, 1.6 + half))


def test_clear_of_the_tolerance_on_either_side():
    assert clear_of(-1.0, 1.0, 2.0)           # inside
    assert clear_of(2.5, 9.0, 2.0)            # beyond, above
    assert clear_of(-9.0, -2.5, 2.0)          # beyond, below
    assert not clear_of(1.0, 3.0, 2.0)        # straddles +tolerance
    assert not clear_of(-3.0, 0.0, 2.0)       # straddles -tolerance
    assert not clear_of(-3.0, 3.0, 2.0)       # both
    assert not clear_of(float("nan"), 1.0, 2.0)


def _forged(values: dict[str, np.ndarray]) -> _Model:
    """A model whose 20 resplits are already computed (nothing is fitted)."""
    m = _Model(np.zeros((1, 1)))
    m.auroc = values["auroc"]
    m.scores = ProbeScores(values["lpr"], values["lpr"] / 100.0)
    return m


def _layer(shift_u: float, shift_o: float, seed: int = 0, sd: float = 1.0) -> list[_Model]:
    """unlearned, original and one reference, per-split numbers: reference ~ 80 + N(0, 1), the others
    the reference plus their shift plus N(0, sd) (paired differences), for both statistics."""
    rng = np.random.default_rng(seed)
    ref = 80 + rng.normal(size=20)
    u = ref + shift_u + sd * rng.normal(size=20)
    o = ref + shift_o + sd * rng.normal(size=20)
    return [_forged({"auroc": a, "lpr": a}) for a in (u, o, ref)]


@pytest.fixture(scope="module")
def splits():
    y = np.r_[np.ones(30, bool), np.zeros(70, bool)]
    return y, make_splits(y, AuditConfig(n_splits=20))


def test_stops_at_the_first_look_when_clear_and_goes_to_the_maximum_when_borderline(splits):
    y, sp = splits
    cfg = AuditConfig(n_splits=20)  # three looks; tolerances: 5 points (ΔAUROC), 2 points (ΔLPR)
    models = {"clear": _layer(shift_u=0.0, shift_o=30.0, sd=0.3),       # retrain-like; original far beyond
              "borderline": _layer(shift_u=2.0, shift_o=30.0, sd=1.0)}  # ΔLPR sits on its tolerance
    stops = resplit(models, y, sp, cfg)
    assert stops["clear"] == {"auroc": 5, "lpr": 5}
    assert stops["borderline"]["lpr"] == 20
    assert stops["borderline"]["auroc"] == 5  # 2 points is well inside ΔAUROC's 5


def test_every_model_of_a_layer_gets_the_same_resplits():
    """Computed for real (tiny features): the pairing holds, and the numbers of the first J resplits
    are those of the fixed design on the same splits."""
    from unlearnkit.audit.probing import probe_scores

    rng = np.random.RandomState(0)
    y = np.r_[np.ones(30, bool), np.zeros(90, bool)]
    xs = [rng.randn(120, 4) + s * y[:, None] for s in (0.4, 3.0, 0.4)]  # unlearned, original, reference
    cfg = AuditConfig(n_splits=10, resplit_looks=(5,), n_jobs=1)
    sp = make_splits(y, cfg)
    models = {"layer": [_Model(x) for x in xs]}
    stops = resplit(models, y, sp, cfg)["layer"]
    for stat in ("auroc", "lpr"):
        done = {m.computed(stat) for m in models["layer"]}
        assert len(done) == 1 and done.pop() >= stops[stat]  # the same resplits for every model
    j = stops["lpr"]
    fixed = probe_scores(xs, y, sp[:j], cfg)
    for m, f in zip(models["layer"], fixed):
        assert np.array_equal(m.values("lpr", j), f.bacc)


def test_the_stopped_interval_keeps_its_coverage():
    """Monte Carlo: per-split differences N(mu, 1), plain t-intervals (exact at every look); whatever
    look the rule stops at, its interval covers mu in >= 95 % of replicates (Bonferroni over 3 looks)."""
    y = np.r_[np.ones(30, bool), np.zeros(70, bool)]
    cfg = AuditConfig(ci_method="t", lpr_margin=2.0, n_splits=20)
    sp = make_splits(y, cfg)
    rng = np.random.default_rng(1)
    covered, n_rep, early = 0, 300, 0
    for _ in range(n_rep):
        mu = rng.uniform(0.0, 4.0)  # around the tolerance, where stopping depends on the noise
        ref = 80 + rng.normal(size=20)
        u = ref + mu + rng.normal(size=20)
        o = ref + 30 + 0.1 * rng.normal(size=20)
        models = {"l": [_forged({"auroc": a, "lpr": a}) for a in (u, o, ref)]}
        j = resplit(models, y, sp, cfg)["l"]["lpr"]
        early += j < 20
        _, lo, hi, _ = paired_interval((u - ref)[:j], sp, y.size, cfg, look_confidence(cfg))
        covered += lo <= mu <= hi
    assert early > n_rep // 4  # the rule does stop early often
    assert covered / n_rep >= 0.95 - 2 * np.sqrt(0.05 * 0.95 / n_rep)


@pytest.mark.skipif(not sys.platform.startswith("linux") or bool(runtime.gpu_device_nodes()),
                    reason="probe processes are forked on Linux machines without a GPU only")
def test_forked_probe_processes_give_the_threads_numbers(monkeypatch):
    """Adaptive resplitting with its probes in forked worker processes (the default with two workers
    on Linux, for enough work) and on threads (where a process cannot be forked, or for little
    work): the same resplits, bit for bit."""
    from unlearnkit.audit import probing

    rng = np.random.RandomState(0)
    y = np.r_[np.ones(30, bool), np.zeros(90, bool)]
    xs = [rng.randn(120, 4) + s * y[:, None] for s in (0.4, 3.0, 0.4)]
    xs[0][0, 0] = np.nan  # made finite (0) in the workers' copy, as on threads
    cfg = AuditConfig(n_splits=10, resplit_looks=(5,), n_jobs=2)
    sp = make_splits(y, cfg)
    submitted = []
    submit = probing.ProbeProcesses.submit
    monkeypatch.setattr(probing.ProbeProcesses, "submit",
                        lambda self, *a: submitted.append(os.getpid()) or submit(self, *a))
    small = {"l": [_Model(x) for x in xs]}
    stops = resplit(small, y, sp, cfg)
    assert submitted == []  # too little work to be worth forking for
    monkeypatch.setattr(probing, "PROCESS_MIN_WORK", 0)
    forked = {"l": [_Model(x) for x in xs]}
    assert resplit(forked, y, sp, cfg) == stops
    n_forked = len(submitted)
    assert n_forked >= 3 and probing._FORKED_X == {}  # used, and let go of the features
    off = {"l": [_Model(x) for x in xs]}
    assert resplit(off, y, sp, AuditConfig(n_splits=10, resplit_looks=(5,), n_jobs=2, probe_processes=False)) == stops
    monkeypatch.setattr(runtime, "fork_is_safe", lambda: False)
    threads = {"l": [_Model(x) for x in xs]}
    assert resplit(threads, y, sp, cfg) == stops
    assert len(submitted) == n_forked  # switched off, or where a process cannot fork: all on threads
    for a, b, c in zip(forked["l"], threads["l"], small["l"]):
        assert a.computed("lpr") == b.computed("lpr") == c.computed("lpr")
        j = a.computed("lpr")
        assert np.array_equal(a.values("lpr", j), b.values("lpr", j))
        assert np.array_equal(a.values("lpr", j), c.values("lpr", j))
