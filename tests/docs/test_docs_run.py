"""Docs that run (issue 31): every runnable block of README.md and docs/*.md, at tiny size, in a fresh folder
per page (rules: tests/docs/docblocks.py). A page that drifts from the code fails here. ``make test-docs``."""
from __future__ import annotations

import copy

import pytest
from runner import ROOT, run_page

pytestmark = pytest.mark.docs

#: pages left out, with the reason
EXCLUDED: dict[str, str] = {}  # page -> why it is left out (none: every page runs)
PAGES = [p for p in ["README.md", *sorted(f"docs/{q.name}" for q in (ROOT / "docs").glob("*.md"))]
         if p not in EXCLUDED]


@pytest.fixture(scope="session")
def namespaces(digits_split, digits_original, cache_dir):
    """The names a Python block's ``<!-- docs-test: namespace NAME -->`` starts with.

    ``digits``: small_cnn models on digits with class 3 forgotten: ``original`` (and ``model``, a copy),
    ``retrained`` (a list of five retrains, seeds 0-4: the number the docs recommend), ``scrub_model`` / ``salun_model``
    (copies of the original: stand-ins for unlearned models), and ``forget_ds`` / ``retain_ds`` / ``test_ds``
    (TensorDatasets of the split's normalised parts)."""
    from torch.utils.data import TensorDataset

    from unlearnkit.training import default_recipe, reference_model

    def retrain(seed):
        return reference_model("retrain", digits_split, "small_cnn", default_recipe("digits", "small_cnn"),
                               seed=seed, cache_dir=cache_dir, progress=False).model

    def ds(part):
        return TensorDataset(part.normalize(part.x), part.y)

    cache: dict = {}

    def digits() -> dict:
        if not cache:
            cache.update(original=digits_original, retrained=[retrain(s) for s in range(5)],
                         forget_ds=ds(digits_split.train_forget), retain_ds=ds(digits_split.train_retain),
                         test_ds=ds(digits_split.test))
        copies = {k: copy.deepcopy(digits_original) for k in ("model", "scrub_model", "salun_model")}
        return {**cache, **copies}

    return {"digits": digits}


@pytest.mark.parametrize("page", PAGES)
def test_page_runs(page, namespaces, tmp_path, monkeypatch):
    monkeypatch.setenv("UNLEARNKIT_PROGRESS", "0")
    done = run_page((ROOT / page).read_text(encoding="utf-8"), page, tmp_path, namespaces)
    print("\n".join(done))
