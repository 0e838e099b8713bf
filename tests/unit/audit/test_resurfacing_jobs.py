"""The resurfacing checks' jobs run in one pool, longest first: the scheduling moves no value."""
from __future__ import annotations

import math

import torch


def test_run_pending_returns_each_checks_values_in_its_own_order_whatever_the_costs():
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.context import AuditContext, Pending

    ctx = AuditContext.for_run(None, AuditConfig(n_jobs=1))  # one worker: the start order is the schedule
    started = []

    def job(name, i):
        def run():
            started.append((name, i))
            return (name, i)
        return run

    a = Pending([(None, ("a",), job("a", i)) for i in range(3)], lambda v: v, cost=[1.0, 5.0, 2.0])
    b = Pending([(None, ("b",), job("b", i)) for i in range(2)], lambda v: [x[1] for x in v], cost=9.0)
    got = ctx.run_pending({"a": a, "b": b})
    assert got == {"a": [("a", 0), ("a", 1), ("a", 2)], "b": [0, 1]}
    assert started == [("b", 0), ("b", 1), ("a", 1), ("a", 2), ("a", 0)]  # longest first, ties in order


def test_one_job_per_learning_rate_gives_the_whole_sweeps_curve(audit_split, original):
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.canonical import canonicalize
    from unlearnkit.audit.relearning import merge_curves, relearn_model, relearn_plan

    cfg = AuditConfig(relearn_budgets=(2, 4), relearn_lrs=(0.01, 0.005))
    plan, why = relearn_plan(audit_split, cfg, seed=3)
    assert why == ""
    canon = canonicalize(original)
    whole = relearn_model(original, plan, audit_split, cfg, torch.device("cpu"), canonical=canon)
    parts = merge_curves([relearn_model(original, plan, audit_split, cfg, torch.device("cpu"), canonical=canon,
                                        lrs=(lr,)) for lr in cfg.relearn_lrs])
    assert set(parts.prob) == set(whole.prob) and len(whole.prob) == 2 * 2 * len(plan.sets())
    for key, v in whole.prob.items():
        assert math.isfinite(v) and parts.prob[key] == v and parts.phi[key] == whole.phi[key]
    assert parts.acc == whole.acc and parts.canonical == whole.canonical and parts.diverged == whole.diverged
