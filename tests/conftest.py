"""Shared fixtures: a per-session model cache, digits + small_cnn trained once."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("UNLEARNKIT_PROGRESS", "0")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("model-cache")
    old = os.environ.get("UNLEARNKIT_CACHE")
    os.environ["UNLEARNKIT_CACHE"] = str(d)
    yield d
    if old is None:
        os.environ.pop("UNLEARNKIT_CACHE", None)
    else:
        os.environ["UNLEARNKIT_CACHE"] = old


@pytest.fixture(scope="session")
def digits():
    from unlearnkit import load_dataset

    return load_dataset("digits")


@pytest.fixture(scope="session")
def digits_split(digits):
    from unlearnkit import ForgetSpec, make_split

    return make_split(digits, ForgetSpec(classes=(3,)))


@pytest.fixture(scope="session")
def digits_original(digits_split, cache_dir):
    """small_cnn trained on digits (about 5 s), shared by every test of the session."""
    from unlearnkit.training import default_recipe, reference_model

    return reference_model("original", digits_split, "small_cnn", default_recipe("digits", "small_cnn"),
                           seed=0, cache_dir=cache_dir, progress=False).model


@pytest.fixture(scope="session")
def digits_retrain(digits_split, cache_dir):
    """small_cnn retrained on digits without class 3 (seed 0; the same cache key as the audit tests' retrain0)."""
    from unlearnkit.training import default_recipe, reference_model

    return reference_model("retrain", digits_split, "small_cnn", default_recipe("digits", "small_cnn"),
                           seed=0, cache_dir=cache_dir, progress=False).model


VFL_TEST_MODEL = {"parties": 2, "bottom": "mirage_bottom", "bottom_kwargs": {"width": 16}}


@pytest.fixture(scope="session")
def digits_vfl_original(digits_split, cache_dir):
    """A 2-party VFL model (Mirage's bottom at width 16 + its MLP top) trained on digits (about 5 s)."""
    from unlearnkit.training import default_recipe, reference_model

    return reference_model("original", digits_split, "vfl", default_recipe("digits", "vfl"), seed=0,
                           model_kwargs=VFL_TEST_MODEL, cache_dir=cache_dir, progress=False).model


@pytest.fixture(scope="session")
def digits_vfl_retrain(digits_split, cache_dir):
    """The same VFL model retrained without class 3."""
    from unlearnkit.training import default_recipe, reference_model

    return reference_model("retrain", digits_split, "vfl", default_recipe("digits", "vfl"), seed=0,
                           model_kwargs=VFL_TEST_MODEL, cache_dir=cache_dir, progress=False).model


@pytest.fixture(scope="session")
def digits_vfl_retrains(digits_split, cache_dir, digits_vfl_retrain):
    """Three VFL retrains (seeds 0-2): references the audit can compare a model with."""
    from unlearnkit.training import default_recipe, reference_model

    return [digits_vfl_retrain] + [
        reference_model("retrain", digits_split, "vfl", default_recipe("digits", "vfl"), seed=s,
                        model_kwargs=VFL_TEST_MODEL, cache_dir=cache_dir, progress=False).model for s in (1, 2)]
