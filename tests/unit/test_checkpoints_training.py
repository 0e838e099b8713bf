import pytest
import torch
from bad_files import checkpoint_variants

from unlearnkit import create_model, load_checkpoint, save_checkpoint
from unlearnkit.errors import CheckpointError, NonFiniteLossError
from unlearnkit.loop import Recipe, fit, lr_at
from unlearnkit.training import reference_model


def test_checkpoint_round_trip_weights_only(tmp_path):
    m = create_model("small_cnn", 10, 1, 8, width=8)
    p = tmp_path / "m.pt"
    digest = save_checkpoint(m, p, {"note": "x", "n": torch.tensor(3), "version": torch.__version__})
    raw = torch.load(p, weights_only=True)  # plain types only
    assert raw["sha256"] == digest and raw["model"] == {"name": "small_cnn", "kwargs": {
        "num_classes": 10, "in_channels": 1, "image_size": 8, "width": 8}}
    m2, meta = load_checkpoint(p)
    assert meta["note"] == "x" and meta["sha256"] == digest
    assert all(torch.equal(a, b) for a, b in zip(m.state_dict().values(), m2.state_dict().values()))
    assert not list(tmp_path.glob(".*tmp"))  # atomic write left nothing behind


def test_checkpoint_errors(tmp_path):
    m = create_model("small_cnn", 10, 1, 8, width=8)
    p = tmp_path / "m.pt"
    save_checkpoint(m, p)
    data = p.read_bytes()
    (tmp_path / "trunc.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(tmp_path / "trunc.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    with pytest.raises(CheckpointError, match="not a 'resnet18'"):
        load_checkpoint(p, model_name="resnet18")
    with pytest.raises(CheckpointError, match="has 10 classes, expected 5"):
        load_checkpoint(p, num_classes=5)
    with pytest.raises(CheckpointError, match="image size 8, but the data has 28"):
        load_checkpoint(p, num_classes=10, in_channels=1, image_size=28)
    # a plain state dict of another class count does not fit
    torch.save(m.state_dict(), tmp_path / "plain.pt")
    with pytest.raises(CheckpointError, match="does not fit"):
        load_checkpoint(tmp_path / "plain.pt", model_name="small_cnn", num_classes=4, in_channels=1, image_size=8,
                        width=8)
    plain, meta = load_checkpoint(tmp_path / "plain.pt", model_name="small_cnn", num_classes=10, in_channels=1,
                                  image_size=8, width=8)
    assert meta["source"] == "plain state_dict"
    # tampered tensor bytes that still unpickle are caught by the sha256
    raw = torch.load(p, weights_only=True)
    raw["state_dict"]["fc.bias"] += 1
    torch.save(raw, tmp_path / "tampered.pt")
    with pytest.raises(CheckpointError, match="sha256"):
        load_checkpoint(tmp_path / "tampered.pt")


def test_code_in_checkpoint_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="holds more than tensors"):
        load_checkpoint(tmp_path / "evil.pt")


def test_schedules():
    r = Recipe(lr=0.1, epochs=10, schedule="multistep", milestones=(5, 8), gamma=0.1)
    assert [round(lr_at(r, e), 6) for e in (0, 4, 5, 8, 9)] == [0.1, 0.1, 0.01, 0.001, 0.001]
    c = Recipe(lr=1.0, epochs=4, schedule="cosine")
    assert lr_at(c, 0) == 1.0 and abs(lr_at(c, 2) - 0.5) < 1e-9


def test_fit_resume_is_exact(digits):
    recipe = Recipe(lr=0.05, epochs=3, batch_size=128)
    torch.manual_seed(0)
    a = create_model("small_cnn", 10, 1, 8, width=8)
    b = create_model("small_cnn", 10, 1, 8, width=8)
    b.load_state_dict(a.state_dict())
    states = []
    fit(a, digits.train, recipe, digits.augment, seed=1, progress=False, on_epoch=lambda s: states.append(s))
    # resume b from the state after epoch 1
    import copy

    fit(b, digits.train, recipe, digits.augment, seed=1, progress=False, resume=copy.deepcopy(states[0]))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_fit_stops_on_nan(digits):
    m = create_model("small_cnn", 10, 1, 8, width=8)
    with torch.no_grad():
        m.fc.bias[0] = float("nan")
    with pytest.raises(NonFiniteLossError, match="lower the learning rate"):
        fit(m, digits.train, Recipe(epochs=1), progress=False)


def test_reference_cache_reuses_and_resumes(digits_split, tmp_path):
    recipe = Recipe(lr=0.05, epochs=2, batch_size=128)
    r1 = reference_model("retrain", digits_split, "small_cnn", recipe, seed=0, model_kwargs={"width": 8},
                         cache_dir=tmp_path, progress=False)
    assert not r1.cached and r1.meta["n_train"] == len(digits_split.train_retain)
    r2 = reference_model("retrain", digits_split, "small_cnn", recipe, seed=0, model_kwargs={"width": 8},
                         cache_dir=tmp_path, progress=False)
    assert r2.cached and r2.path == r1.path and r2.meta["sha256"] == r1.meta["sha256"]
    # the original does not depend on the forget set; another seed is another model
    o = reference_model("original", digits_split, "small_cnn", recipe, seed=0, model_kwargs={"width": 8},
                        cache_dir=tmp_path, progress=False)
    assert o.path != r1.path and o.meta["n_train"] == len(digits_split.train)
    # an interrupted training (only its .partial.pt left) resumes to the same weights
    r1.path.unlink()
    states = []
    torch.manual_seed(0)
    m = create_model("small_cnn", 10, 1, 8, width=8)
    fit(m, digits_split.train_retain, recipe, digits_split.dataset.augment, seed=0, progress=False,
        on_epoch=lambda s: states.append(s))
    torch.save(states[0], r1.path.with_suffix(".partial.pt"))
    r3 = reference_model("retrain", digits_split, "small_cnn", recipe, seed=0, model_kwargs={"width": 8},
                         cache_dir=tmp_path, progress=False)
    assert r3.meta["sha256"] == r1.meta["sha256"] and not r1.path.with_suffix(".partial.pt").exists()


def test_checkpoint_structure_is_checked_by_one_function(tmp_path):
    """Every misshapen payload is a CheckpointError (a UserError) naming the file and what is wrong, from
    check_structure (read_checkpoint calls it, so every reader gets it) and through load_checkpoint."""
    from unlearnkit.checkpoints import check_structure, read_checkpoint
    from unlearnkit.errors import UserError

    m = create_model("small_cnn", 10, 1, 8, width=8)
    save_checkpoint(m, tmp_path / "good.pt")
    good = torch.load(tmp_path / "good.pt", weights_only=True)
    check_structure(good, "good.pt")  # the real thing passes
    for name, (payload, why) in checkpoint_variants(good, m.state_dict()).items():
        path = tmp_path / f"{name}.pt"
        torch.save(payload, path)
        with pytest.raises(UserError) as e:
            load_checkpoint(path, model_name="small_cnn", num_classes=10, in_channels=1, image_size=8, width=8)
        assert isinstance(e.value, CheckpointError) and str(path) in str(e.value) and why in str(e.value), why
        if "bogus" not in why:  # an unknown model kwarg is found when the model is built
            with pytest.raises(CheckpointError, match=why.replace("'", ".").replace("(", ".")):
                read_checkpoint(path)


def test_non_finite_weights_are_named():
    from unlearnkit.checkpoints import require_finite, require_finite_models

    m = create_model("small_cnn", 10, 1, 8, width=8)
    assert require_finite(m, "original") is m
    broken = create_model("small_cnn", 10, 1, 8, width=8)
    with torch.no_grad():
        broken.fc.weight[0, 0] = float("inf")
    with pytest.raises(CheckpointError, match=r"retrained\[1\] has non-finite weights .*fc\.weight"):
        require_finite_models(original=m, unlearned=m, retrained=[m, broken])
    require_finite_models(original="not a model", retrained=None)  # left to the caller's own checks
