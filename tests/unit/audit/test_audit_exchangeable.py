"""A model is measured the same whether it is the audited one or a reference.

Every prediction bound the audit reads (each statistic's, and the joint test's: each model standardised against
the other K) assumes that a genuine retrain is exchangeable with the references: measured by the same procedure,
on the same draws, splits and landmarks. A path that measured the audited model otherwise (its own shot draws, a
cached reference number from another audit seed, another feature pass) would move every genuine retrain away from
the references and cost power, or let a model hide among them. Here retrain 5 is audited against retrains 0-4, then
retrain 0 against retrains 5, 1, 2, 3, 4 with the same audit seed: each model's number on every statistic that is
one model's own (all but output agreement and output membership, which read the other models' mean) is the same in
both roles.
"""
from __future__ import annotations

import math

import pytest
from audit_helpers import AUDIT_SEED, _train, cached_audit

#: statistics that read the other models (the references' mean φ per example), so a model's value depends on its role
RELATIVE = ("output agreement", "output membership")


def _values(rep) -> dict:
    """(family, name, layer, data) -> (the audited model's value, the references' values) on the flag's scale."""
    out = {}
    for c in rep.checks:
        m = c.measure
        if m.name in RELATIVE:
            continue
        u, _, refs = m.flag_values if m.flag_values is not None else (m.unlearned, m.original, m.references)
        out[(m.family, m.name, m.layer, m.data)] = (float(u), [float(r) for r in refs])
    return out


@pytest.mark.heavy
def test_a_model_reads_the_same_as_the_audited_model_and_as_a_reference(rep_erased5, original, refs5, audit_split,
                                                                        audit_cache, report_cache):
    from unlearnkit.audit import AuditConfig

    retrain5 = _train("retrain", audit_split, 5, audit_cache)
    swapped = cached_audit(report_cache, "swapped", original, refs5[0], [retrain5, *refs5[1:]], audit_split,
                           config=AuditConfig(audit_seed=AUDIT_SEED))
    first, second = _values(rep_erased5), _values(swapped)
    assert first.keys() == second.keys() and len(first) >= 20
    families = set()
    for key, (u5, refs) in first.items():
        u0, refs_swapped = second[key]
        for a, b in ((u5, refs_swapped[0]), (refs[0], u0), *zip(refs[1:], refs_swapped[1:])):
            assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b)), (key, a, b)
        families.add(key[0])
    assert {"output", "representation", "relearning", "heads", "batchnorm"} <= families
