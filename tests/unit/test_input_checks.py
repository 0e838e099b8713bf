"""Values checked where they enter: devices this build can use, learning rates a float32 update can take,
epoch counts that make a method do something (issue 30)."""
from __future__ import annotations

import pytest
import torch

from unlearnkit import validate
from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS
from unlearnkit.runtime import resolve_device


@pytest.mark.parametrize("value, msg", [
    ("meta", "not a device this toolkit computes on"), (torch.device("meta"), "meta"),
    ("garbage", "unknown device"), ("xpu", "xpu"), (5, "not 5"),
])
def test_devices_this_build_cannot_use_are_refused(value, msg):
    with pytest.raises(UserError, match=msg):
        resolve_device(value)


def test_absent_accelerators_are_refused():
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(UserError, match="cuda"):
        resolve_device(f"cuda:{count}")  # one past the last GPU (any GPU, when there is none)
    if not torch.backends.mps.is_available():
        with pytest.raises(UserError, match="mps"):
            resolve_device("mps")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if count else "cpu")


@pytest.mark.parametrize("lr", [1e300, 3.5e38, 0, -1, float("inf"), float("nan")])
def test_learning_rates_must_fit_a_float32_update(lr):
    with pytest.raises(UserError, match="--lr"):
        validate.learning_rate("--lr", lr)
    with pytest.raises(UserError, match="lr"):
        METHODS.get("finetune").from_preset("test", lr=lr)
    assert validate.learning_rate("--lr", 10.0) == 10.0


@pytest.mark.parametrize("name, params", [
    ("finetune", {"epochs": 0}), ("gradient_ascent", {"epochs": 0}), ("scrub", {"epochs": 0}),
    ("cola", {"collapse_epochs": 0, "align_epochs": 0}), ("unsir", {"impair_epochs": 0, "repair_epochs": 0}),
])
def test_hyperparameters_that_leave_the_model_unchanged_are_refused(name, params):
    with pytest.raises(UserError, match="epochs") as e:
        METHODS.get(name).from_preset("test", **params)
    assert name in str(e.value)


def test_zero_epochs_stay_allowed_where_the_method_still_changes_the_model():
    """Masked small gradients re-initialises weights before its loop: 0 epochs is that edit alone; a method
    of phases may skip one of them."""
    assert METHODS.get("masked_small_gradients").from_preset("test", epochs=0).epochs == 0
    assert METHODS.get("cola").from_preset("test", collapse_epochs=0).collapse_epochs == 0
