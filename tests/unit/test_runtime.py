"""The GPU fast-path options, on the CPU: bf16 autocast, channels_last, deterministic, cache keys."""
import os
import platform
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from unlearnkit import create_model
from unlearnkit.cli import app
from unlearnkit.loop import Recipe, fit
from unlearnkit.methods import METHODS
from unlearnkit.runtime import Runtime
from unlearnkit.training import reference_key

RECIPE = Recipe(lr=0.05, epochs=1, batch_size=64)


def _fit(digits, runtime=None, hook=None):
    """One epoch on 640 training digits (10 steps)."""
    torch.manual_seed(0)
    m = create_model("small_cnn", 10, 1, 8)
    if hook is not None:
        m.block1[0].register_forward_hook(hook)
    data = digits.train.subset(torch.arange(640))
    state = fit(m, data, RECIPE, digits.augment, seed=0, progress=False, runtime=runtime)
    return m, state.history[-1]


def test_default_runtime_changes_no_cache_key(digits_split):
    args = ("original", digits_split, "small_cnn", {}, RECIPE, 0)
    assert Runtime().cache_key() == {}
    assert reference_key(*args) == reference_key(*args, runtime=Runtime(channels_last=True))
    assert reference_key(*args, runtime=Runtime(amp="bf16")) == {**reference_key(*args), "amp": "bf16"}


def test_bf16_autocast_trains_in_bf16_on_cpu(digits):
    dtypes = []
    _, plain = _fit(digits)
    _, amp = _fit(digits, Runtime(amp="bf16"), hook=lambda mod, inp, out: dtypes.append(out.dtype))
    assert set(dtypes) == {torch.bfloat16}
    assert amp["loss"] != plain["loss"] and abs(amp["loss"] - plain["loss"]) < 0.1 * plain["loss"]
    assert amp["acc"] > 20  # it learns (chance is 10 %)


def test_channels_last_gives_the_same_model_and_gives_it_back_contiguous(digits):
    formats = []
    plain, h0 = _fit(digits)
    nhwc, h1 = _fit(digits, Runtime(channels_last=True),
                    hook=lambda mod, inp, out: formats.append(out.is_contiguous(memory_format=torch.channels_last)))
    assert all(formats) and formats
    assert all(p.is_contiguous() for p in nhwc.parameters())
    for a, b in zip(plain.state_dict().values(), nhwc.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert h0["acc"] == pytest.approx(h1["acc"], abs=0.2)


def test_deterministic_switch_is_restored_and_changes_nothing_on_cpu(digits):
    plain, _ = _fit(digits)
    det, _ = _fit(digits, Runtime(deterministic=True))
    assert not torch.are_deterministic_algorithms_enabled()
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), det.state_dict().values()))


def test_a_method_runs_with_the_fast_path_options_on_cpu(digits_split, digits_original):
    ft = METHODS.get("finetune")(lr=0.01, epochs=1, batch_size=256)
    base = ft.unlearn(digits_original, digits_split)
    fast = ft.unlearn(digits_original, digits_split, runtime=Runtime(amp="bf16", channels_last=True))
    assert all(p.is_contiguous() for p in fast.model.parameters())
    assert abs(fast.history[0]["retain_loss"] - base.history[0]["retain_loss"]) < 0.05


def test_bad_runtime_options_are_one_line(tmp_path):
    r = CliRunner().invoke(app, ["train", "--dataset", "digits", "--out", str(tmp_path / "m.pt"), "--amp", "fp8"])
    assert r.exit_code == 2 and r.output.strip() == "error: amp must be one of off, bf16, not 'fp8'"
    with pytest.raises(Exception, match="unknown runtime option"):
        Runtime.from_dict({"fp16": True})


@pytest.mark.slow
def test_compiled_forward_trains_like_eager(digits):
    plain, h0 = _fit(digits)
    comp, h1 = _fit(digits, Runtime(compile=True))
    assert h1["loss"] == pytest.approx(h0["loss"], rel=1e-3)


_FAULTS = """
import resource, sys, torch
from unlearnkit.runtime import tune_cpu_allocator

def faults(n=6):  # minor page faults while a 64 MB tensor is allocated, written and freed n times
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        torch.ones(16 << 20).sum()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

default = faults()
# the least of three tuned measurements: the VM's proactive reclaim (DAMON's kdamond) can take back a freed
# block's idle pages between allocations, which re-faults them however malloc is tuned (seen once in a full run)
print(default, tune_cpu_allocator(), tune_cpu_allocator(), min(faults() for _ in range(3)))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc's mallopt")
def test_tuned_allocator_reuses_freed_memory_instead_of_faulting_it_in_again():
    """By default glibc hands a 64 MB block back to the kernel when it is freed, so every new one is
    faulted in page by page (16,384 pages of 4 KiB); tuned, the freed block is reused."""
    env = {**os.environ, "UNLEARNKIT_MALLOC_TUNING": "1"}
    out = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True, env=env, check=True)
    default, took, again, tuned = out.stdout.split()
    assert took == again == "True"
    assert int(default) > 6 * 16384 * 0.9  # every allocation faulted in again
    assert int(tuned) < 2 * 16384  # at most the first one


def test_allocator_tuning_can_be_turned_off_and_the_cli_asks_for_it(monkeypatch):
    import importlib

    from unlearnkit import runtime

    cli_app = importlib.import_module("unlearnkit.cli.app")  # the module (the package exports the app)

    monkeypatch.setattr(runtime, "_ALLOCATOR_TUNED", None)
    monkeypatch.setenv("UNLEARNKIT_MALLOC_TUNING", "0")
    assert runtime.tune_cpu_allocator() is False
    calls = []
    monkeypatch.setattr(runtime, "tune_cpu_allocator", lambda: calls.append(1))
    monkeypatch.setattr(cli_app, "app", lambda: None)
    monkeypatch.setattr(sys, "argv", ["unlearnkit", "list"])  # a command (--help alone does not tune)
    cli_app.main()
    assert calls == [1]
