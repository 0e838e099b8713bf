"""``torchrun --nproc_per_node 2 -m unlearnkit ...`` with two gloo processes on the CPU gives the
single-process result (same global batch) within floating-point tolerance.

digits with its recipe at batch 128: 1,295 training rows end in a batch of 15 (8 + 7 rows);
small_cnn has BatchNorm (normalised over the global batch), ReLU and max-pooling.

1. float32, the documented command: ``torchrun ... -m unlearnkit train`` resumes an interrupted
   training (rank 0 reads the partial state and sends it) for its second epoch; the weights agree
   with one process to ~1e-7.
2. float64 (``ddp_worker.py`` sets the default dtype): ``torchrun ... run`` reuses a cached
   original (rank 0 reads it and sends it), trains the retrain reference data-parallel and runs
   five loop methods, one with a last forget batch of 1 row (rank 1 holds none). Why float64: in
   float32 the two runs differ by ~4e-6 (relative) per step in the gradients, like any other
   summation order, and over longer trainings such a difference eventually flips a ReLU or
   max-pool decision: measured on the float32 retrain (digits without class 3, 2 epochs) the
   weights drifted from 1e-6 to 7.7e-6 at step 15 and to 0.078 after 38 steps, while a one-step
   comparison from identical weights stayed at ~4e-6. In float64 the same code agrees to
   3e-16 - 1e-15 (measured; the test allows 1e-9).
"""
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import yaml

from unlearnkit import ForgetSpec, load_checkpoint, make_split
from unlearnkit.config import RunConfig
from unlearnkit.runner import run_experiment
from unlearnkit.training import default_recipe, reference_model, with_overrides

SRC = Path(__file__).resolve().parents[2] / "src"
WORKER = Path(__file__).with_name("ddp_worker.py")
pytestmark = pytest.mark.torchrun
RECIPE = {"epochs": 2, "batch_size": 128}  # 1,295 rows: a last batch of 15 rows (8 + 7)


def torchrun(args: list[str], cache: Path, float64: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           "UNLEARNKIT_CACHE": str(cache), "UNLEARNKIT_PROGRESS": "0", "OMP_NUM_THREADS": "1"}
    target = [str(WORKER)] if float64 else ["-m", "unlearnkit"]
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        *target, *args], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


@pytest.fixture(scope="module")
def caches(tmp_path_factory, digits):
    """Single process: the original in cache ``one``; in cache ``two`` the same training interrupted
    after epoch 1 (its partial state written, as after Ctrl-C)."""
    import unlearnkit.training as training

    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    split = make_split(digits, ForgetSpec(classes=(3,)))
    recipe = with_overrides(default_recipe("digits", "small_cnn"), **RECIPE)
    ref = reference_model("original", split, "small_cnn", recipe, seed=0, cache_dir=one, progress=False)
    write = training.atomic_write_bytes

    def write_then_stop(path, fn):
        write(path, fn)
        raise KeyboardInterrupt

    training.atomic_write_bytes = write_then_stop
    try:
        with pytest.raises(KeyboardInterrupt):
            reference_model("original", split, "small_cnn", recipe, seed=0, cache_dir=two, progress=False)
    finally:
        training.atomic_write_bytes = write
    assert (two / ref.path.name).with_suffix(".partial.pt").exists()
    return one, two, ref


@pytest.fixture(scope="module")
def train_log(caches):
    """``torchrun ... train`` into cache ``two``, resuming the interrupted training."""
    return torchrun(["train", "--dataset", "digits", "--epochs", "2", "--batch-size", "128",
                     "--out", str(caches[1] / "out.pt")], caches[1])


def test_torchrun_train_resumes_and_matches_one_process(caches, train_log):
    one, two, ref = caches
    log = train_log
    assert log.count("resuming original training from epoch 1") == 1  # rank 0 alone reads and says it
    assert "trained, 2 processes" in log
    model, meta = load_checkpoint(two / "out.pt")
    assert_same_weights(model.state_dict(), ref.model.state_dict())
    h2, h1 = meta["history"], ref.meta["history"]
    assert h2[0] == h1[0]  # epoch 1 came from the partial state
    assert h2[1]["loss"] == pytest.approx(h1[1]["loss"], rel=1e-5)
    assert h2[1]["acc"] == pytest.approx(h1[1]["acc"], abs=0.1)
    assert not list(two.glob("*.partial.pt")) and not list(two.glob(".*.tmp"))


@contextmanager
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def test_torchrun_run_methods_match_one_process_in_float64(digits, tmp_path):
    n_forget = len(make_split(digits, ForgetSpec(classes=(3,))).train_forget)
    params = {"random_label": {"epochs": 1}, "salun": {"epochs": 1}, "bad_teacher": {"epochs": 1},
              "boundary_shrink": {"epochs": 1},
              "gradient_ascent": {"epochs": 2, "batch_size": n_forget - 1}}  # last forget batch: 1 row
    cfg = {"dataset": "digits", "forget_classes": [3], "methods": list(params), "method_params": params,
           "recipe": {"epochs": 1}, "model_kwargs": {"width": 8, "hidden": 32}, "audit": False}  # float64 is slow
    one, two = tmp_path / "cache-one", tmp_path / "cache-two"
    with float64():
        single = run_experiment(RunConfig(**cfg, out=str(tmp_path / "one"), cache_dir=str(one)),
                                progress=False).to_dict()
    original = Path(single["models"]["original"]["checkpoint"])
    two.mkdir()
    shutil.copyfile(original, two / original.name)  # the original is cached for the two processes
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({**cfg, "out": str(tmp_path / "ddp"), "cache_dir": str(two)}))
    log = torchrun(["run", "--config", str(tmp_path / "cfg.yaml"), "--no-progress"], two, float64=True)
    assert log.count("original: cached") == 1 and log.count("retrain: trained") == 1
    ddp = json.loads((tmp_path / "ddp" / "results.json").read_text())
    diff = {name: max_difference(torch.load(ddp["models"][name]["checkpoint"], weights_only=True)["state_dict"],
                                 torch.load(single["models"][name]["checkpoint"], weights_only=True)["state_dict"])
            for name in ["retrain", *params]}
    print("max weight difference, two processes vs one (float64):", diff)
    assert max(diff.values()) < 1e-9, diff
    for name in params:  # the methods' losses are reduced over the ranks
        for e2, e1 in zip(ddp["models"][name]["history"], single["models"][name]["history"]):
            assert e2.keys() == e1.keys()
            for k in e1:
                assert e2[k] == pytest.approx(e1[k], rel=1e-9, abs=1e-12), (name, k)
    for name, entry in single["models"].items():  # rank 0 evaluated the same models
        m2 = {k: v for k, v in ddp["models"][name]["metrics"].items() if k not in ("runtime_s", "speedup")}
        m1 = {k: v for k, v in entry["metrics"].items() if k not in ("runtime_s", "speedup")}
        assert m2 == pytest.approx(m1, abs=1e-6), name
