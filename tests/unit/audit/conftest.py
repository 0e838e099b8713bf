"""Fixtures of the audit tests: digits, class 3 forgotten, small_cnn references trained once per session.

Models come from ``training.reference_model`` through a temporary cache (the shared ``cache_dir``
fixture when the root conftest provides one, so the original is trained once per session).
Torch and BLAS run single-threaded inside these tests: on a 2-core machine small CPU kernels are several
times faster that way, and the setting is restored after each test.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("UNLEARNKIT_PROGRESS", "0")

from audit_helpers import FORGET_CLASS, _train, cached_audit, masked_head, single_thread


@pytest.fixture(autouse=True)
def _one_thread():
    with single_thread():
        yield


@pytest.fixture(scope="session")
def audit_cache(request, tmp_path_factory):
    try:
        return request.getfixturevalue("cache_dir")
    except pytest.FixtureLookupError:
        return tmp_path_factory.mktemp("audit-model-cache")


@pytest.fixture(scope="session")
def audit_digits():
    from unlearnkit import load_dataset

    return load_dataset("digits")


@pytest.fixture(scope="session")
def audit_split(audit_digits):
    from unlearnkit import ForgetSpec, make_split

    return make_split(audit_digits, ForgetSpec(classes=(FORGET_CLASS,)))


@pytest.fixture(scope="session")
def original(audit_split, audit_cache):
    return _train("original", audit_split, 0, audit_cache)


@pytest.fixture(scope="session")
def retrain0(audit_split, audit_cache):
    return _train("retrain", audit_split, 0, audit_cache)


@pytest.fixture(scope="session")
def retrain1(audit_split, audit_cache):
    return _train("retrain", audit_split, 1, audit_cache)


@pytest.fixture(scope="session")
def retrain2(audit_split, audit_cache):
    return _train("retrain", audit_split, 2, audit_cache)


@pytest.fixture(scope="session")
def retrain3(audit_split, audit_cache):
    return _train("retrain", audit_split, 3, audit_cache)


@pytest.fixture(scope="session")
def report_cache():
    """Audits are the slow part: each (case, config) is computed once per session."""
    return {}


@pytest.fixture(scope="session")
def rep_erased(report_cache, original, retrain0, retrain1, audit_split):
    """Another retrain seed against one reference, default config: within tolerance everywhere, but with one
    reference the output membership test cannot run, so never certified erased."""
    return cached_audit(report_cache, "erased", original, retrain1, retrain0, audit_split)


@pytest.fixture(scope="session")
def rep_erased5(report_cache, original, audit_split, audit_cache):
    """Another retrain seed (5) against five references (0-4), default config: must be certified erased
    (the retrains come through the model cache: seeds 0-3 are the fixtures' models)."""
    refs = [_train("retrain", audit_split, seed, audit_cache) for seed in range(5)]
    return cached_audit(report_cache, "erased5", original, _train("retrain", audit_split, 5, audit_cache), refs,
                        audit_split)


@pytest.fixture(scope="session")
def rep_suppressed(report_cache, original, retrain0, audit_split):
    """The original with the forgotten class masked at the output, default config: never erased."""
    return cached_audit(report_cache, "suppressed", original, masked_head(original), retrain0, audit_split)


@pytest.fixture(scope="session")
def tiny_split(audit_digits, tmp_path_factory):
    """Three forgotten training indices: far too few to certify anything."""
    from unlearnkit import ForgetSpec, make_split

    f = tmp_path_factory.mktemp("tiny") / "forget.txt"
    f.write_text("5 17 230\n")
    return make_split(audit_digits, ForgetSpec(indices_file=str(f)))


@pytest.fixture(scope="session")
def rep_tiny(report_cache, original, tiny_split, audit_cache):
    """The original audited as "unlearned" against the retrain without the 3 samples."""
    retrain = _train("retrain", tiny_split, 0, audit_cache)
    return cached_audit(report_cache, "tiny", original, original, retrain, tiny_split)
