"""The MLP probe test (audit/probe_test.py): when it runs, its p-value by hand, what it does to the verdict, and its
settings' checks. The probe itself: tests/unit/metrics/test_metric_mlp_probe.py."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from unlearnkit.audit import AuditConfig
from unlearnkit.audit.checks import Measure, judge_all
from unlearnkit.audit.core import with_probe_test
from unlearnkit.audit.probe_test import ProbeTest, applies, probe_jobs, probe_seeds
from unlearnkit.audit.verdict import REFERENCES_UNDER_ATTACK, decide, measurements
from unlearnkit.errors import UserError

OUT = {"forget_acc": 0.0, "retain_acc": 99.0, "test_retain_acc": 98.0}
REFS = (0.0, 0.06, -0.06, 0.03, -0.03)


def _certified() -> list[Measure]:
    """One testable statistic at the output and one inside, the audited model at the references' centre: erased."""
    return [Measure("output", "output confidence", "train", None, "two", "u", 0.0, 1.0, REFS),
            Measure("representation", "separability", "train", "penultimate", "two", "u", 0.0, 1.0, REFS)]


def _decide(probe: ProbeTest | None):
    cfg = AuditConfig()
    return decide(measurements(outputs_unlearned=OUT, outputs_retrained=OUT, checks=judge_all(_certified(), cfg),
                               n_forget={"train": 100}, sample_level=False, n_train_forget=100, n_refs=5, config=cfg,
                               probe=probe))


def _probe(value: float, told: bool) -> ProbeTest:
    return ProbeTest(value, (0.02, 0.03, 0.025, 0.021, 0.028), 0.01 if told else 0.6, 0.2, told, "penultimate",
                     (1, 2, 3), (131, 1164))


def test_a_model_the_probe_tells_apart_is_not_certified_and_one_it_does_not_is():
    assert _decide(None).verdict == "erased"
    assert _decide(_probe(0.024, False)).verdict == "erased"
    strength = [e for e in _decide(_probe(0.024, False)).evidence if e.startswith("strength:")]
    assert len(strength) == 1 and "MLP probe test" in strength[0]
    d = _decide(_probe(0.004, True))
    assert d.verdict == "inconclusive"
    line = [e for e in d.evidence if "MLP probe test" in e]
    assert len(line) == 1 and "log loss 0.0040" in line[0] and "0.0200 to 0.0300" in line[0]


def test_when_it_runs():
    auto, on, off = AuditConfig(), AuditConfig(mlp_probe="on"), AuditConfig(mlp_probe="off")
    assert applies(auto, 5, False) is None and applies(auto, 3, False) is None
    assert "below" in applies(auto, REFERENCES_UNDER_ATTACK, False)
    assert applies(on, REFERENCES_UNDER_ATTACK, False) is None
    assert "fewer than 3" in applies(on, 2, False)
    assert "sample request" in applies(on, 5, True)
    assert "off" in applies(off, 5, False)


def test_probe_seeds_come_from_the_audit_seed():
    assert probe_seeds(7, 3) == probe_seeds(7, 3)
    assert probe_seeds(7, 3) != probe_seeds(8, 3) and len(set(probe_seeds(7, 3))) == 3


def test_the_p_value_is_the_prediction_test_on_the_log_losses_by_hand(monkeypatch):
    """The finished test on made-up losses (the probe itself replaced by a lookup of which model's features it got):
    p of a loss as low as the model's among the references', Student t with K - 1 degrees of freedom on the log
    scale, computed here from its formula; the retained rows capped by ``mlp_probe_max_retain``."""
    import torch

    import unlearnkit.audit.probe_test as pt

    losses = [0.012, 0.02, 0.03, 0.025, 0.021, 0.028]  # the audited model's, then five references'
    monkeypatch.setattr(pt, "heldout_log_loss", lambda x, y, seeds: [losses[int(x[0, 0])]] * len(seeds))

    def out(i):
        return {"train_forget": {"penultimate": torch.full((10, 2), float(i))},
                "train_retain": {"penultimate": torch.full((50, 2), float(i))}}

    passes = SimpleNamespace(refs=[None] * 5, penultimate="penultimate", out_u=out(0),
                             out_refs=[out(i) for i in range(1, 6)])
    ctx = SimpleNamespace(config=AuditConfig(mlp_probe_max_retain=40), sample_level=False, audit_seed=3)
    pending = probe_jobs(passes, ctx)
    res = pending.finish([job() for _, _, job in pending.items])
    refs = np.log(losses[1:])
    t = (refs.mean() - math.log(losses[0])) / (refs.std(ddof=1) * math.sqrt(1 + 1 / 5))
    assert res.p == pytest.approx(stats.t.sf(t, 4), rel=1e-12)
    assert res.told_apart == (res.p < 0.2) and res.rows == (10, 40) and res.value == pytest.approx(0.012)


@pytest.mark.parametrize("kw", [{"mlp_probe": "sometimes"}, {"mlp_probe_level": 0.0}, {"mlp_probe_level": 0.7},
                                {"mlp_probe_level": float("nan")}, {"mlp_probe_seeds": 0},
                                {"mlp_probe_max_retain": 0}])
def test_bad_settings_are_refused_naming_them(kw):
    with pytest.raises(UserError, match=next(iter(kw))):
        AuditConfig(**kw)


def test_it_runs_only_where_the_other_tests_certify_and_then_decides_again(monkeypatch):
    """``core.with_probe_test``: on a verdict other than erased no probe is fitted (it could only withhold erased) and
    audit.json's reason says so; on erased the probe runs and the verdict is decided again with it."""
    import torch

    import unlearnkit.audit.probe_test as pt

    fitted = []

    def fake(x, y, seeds):
        fitted.append(1)
        return [0.001 if int(x[0, 0]) == 0 else 0.02 + 0.001 * int(x[0, 0])] * len(seeds)  # the audited model lowest

    monkeypatch.setattr(pt, "heldout_log_loss", fake)

    def out(i):
        return {"train_forget": {"penultimate": torch.full((10, 2), float(i))},
                "train_retain": {"penultimate": torch.full((50, 2), float(i))}}

    passes = SimpleNamespace(refs=[None] * 5, penultimate="penultimate", out_u=out(0),
                             out_refs=[out(i) for i in range(1, 6)])
    ctx = SimpleNamespace(config=AuditConfig(), sample_level=False, audit_seed=3,
                          run_pending=lambda p: {k: v.finish([job() for _, _, job in v.items]) for k, v in p.items()})
    cfg = AuditConfig()
    measured = measurements(outputs_unlearned=OUT, outputs_retrained=OUT, checks=judge_all(_certified(), cfg),
                            n_forget={"train": 100}, sample_level=False, n_train_forget=100, n_refs=5, config=cfg)
    first = decide(measured)
    assert first.verdict == "erased"
    why: dict = {}
    other = SimpleNamespace(verdict="suppressed")
    assert with_probe_test(passes, ctx, measured, other, why) == (measured, other) and not fitted
    assert why["mlp_probe"].startswith("not needed: the other tests read suppressed")
    again, d = with_probe_test(passes, ctx, measured, first, {})
    assert len(fitted) == 6 and again.probe.told_apart and d.verdict == "inconclusive"


def test_too_few_forget_rows_for_its_folds_is_a_reason_not_an_error():
    """With ``min_forget`` set below 5 a model can reach erased on 4 forget rows: the probe then says why it did not
    run instead of failing inside its 5-fold split."""
    import torch

    from unlearnkit.audit.probe_test import probe_jobs

    def out():
        return {"train_forget": {"penultimate": torch.zeros(4, 2)}, "train_retain": {"penultimate": torch.zeros(50, 2)}}

    passes = SimpleNamespace(refs=[None] * 5, penultimate="penultimate", out_u=out(),
                             out_refs=[out() for _ in range(5)])
    ctx = SimpleNamespace(config=AuditConfig(min_forget=2), sample_level=False, audit_seed=3)
    why = probe_jobs(passes, ctx)
    assert why == "fewer than 5 training rows of the forget set or of the rest (4, 50) for its 5 folds"
