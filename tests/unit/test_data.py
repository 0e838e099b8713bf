import numpy as np
import pytest
import torch
from bad_files import cifar_batches, fake_cifar, index_arrays, write_index_file

from unlearnkit import ForgetSpec, load_dataset, make_split
from unlearnkit.data.arrays import Augment, augment_batch
from unlearnkit.errors import DataUnavailableError, UnknownNameError, UserError


def test_digits_splits_are_stratified_and_deterministic(digits):
    again = load_dataset("digits")
    assert torch.equal(digits.train.x, again.train.x) and torch.equal(digits.test.y, again.test.y)
    assert len(digits.train) + len(digits.val) + len(digits.test) == 1797
    # stratified: every class is 10 % of val and 20 % of test up to rounding
    for part, frac in ((digits.test, 0.2), (digits.val, 0.1 * 0.8)):
        counts = np.bincount(part.y.numpy(), minlength=10)
        assert abs(len(part) - frac * 1797) <= 10, (len(part), frac)
        assert counts.min() > 0 and np.all(np.abs(counts / counts.sum() - 0.1) < 0.02)
    other = load_dataset("digits", data_seed=1)
    assert not torch.equal(other.test.y, digits.test.y) or not torch.equal(other.test.x, digits.test.x)
    assert digits.in_channels == 1 and digits.image_size == 8 and digits.num_classes == 10


def test_mnist5k_offline_in_memory():
    b = load_dataset("mnist5k")
    assert b.train.x.dtype == torch.uint8 and b.train.x.shape[1:] == (1, 28, 28)
    assert len(b.train) + len(b.val) + len(b.test) == 5000
    x, y = next(b.test.batches(64))
    assert x.dtype == torch.float32 and abs(float(x.mean())) < 1.0 and len(y) == 64


def test_batches_cover_everything_once_and_eval_is_unaugmented(digits):
    g = torch.Generator().manual_seed(0)
    ys = torch.cat([y for _, y in digits.train.batches(100, shuffle=True, generator=g)])
    assert torch.equal(ys.sort().values, digits.train.y.sort().values)
    a = torch.cat([x for x, _ in digits.test.batches(50)])
    b = torch.cat([x for x, _ in digits.test.batches(7)])
    assert torch.equal(a, b)
    assert torch.allclose(digits.test[3][0], a[3])


def test_augment_crop_and_flip_match_a_per_sample_reference():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(6, 3, 8, 8)
    out = augment_batch(x, Augment(crop_padding=2, hflip=True), torch.Generator().manual_seed(1))
    oy = torch.randint(0, 5, (6,), generator=g)
    ox = torch.randint(0, 5, (6,), generator=g)
    flip = torch.rand(6, generator=g) < 0.5
    xp = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(6):
        ref = xp[i, :, oy[i]:oy[i] + 8, ox[i]:ox[i] + 8]
        ref = ref.flip(2) if flip[i] else ref
        assert torch.equal(out[i], ref)


def test_unknown_and_missing_datasets(tmp_path):
    with pytest.raises(UnknownNameError, match="did you mean 'mnist5k'"):
        load_dataset("mnist5")
    for name in ("cifar10", "cifar100", "mnist", "svhn"):
        with pytest.raises(DataUnavailableError, match="--download"):
            load_dataset(name, data_dir=tmp_path)


def test_cifar_reader_refuses_code_in_pickles(tmp_path):
    import pickle

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (base / f).write_bytes(pickle.dumps({"data": Evil(), "labels": [0]}))
    with pytest.raises(UserError, match="refusing to unpickle"):
        load_dataset("cifar10", data_dir=tmp_path)


def test_cifar_reader_on_fake_files(tmp_path):
    import pickle

    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    rng = np.random.RandomState(0)
    for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        d = {"data": rng.randint(0, 255, (20, 3072)).astype(np.uint8), "labels": list(np.arange(20) % 10)}
        (base / f).write_bytes(pickle.dumps(d))
    b = load_dataset("cifar10", data_dir=tmp_path)
    assert b.train.x.shape[1:] == (3, 32, 32) and len(b.train) + len(b.val) == 100 and len(b.test) == 20


def test_imagefolder(tmp_path):
    from PIL import Image

    for part in ("train", "test"):
        for c in ("benign", "malignant"):
            d = tmp_path / part / c
            d.mkdir(parents=True)
            for i in range(6):
                pixels = np.full((20, 24, 3), 20 * i + (100 if c == "malignant" else 0), np.uint8)
                Image.fromarray(pixels).save(d / f"{i}.png")
    b = load_dataset(f"imagefolder:{tmp_path}", image_size=16)
    assert b.classes == ["benign", "malignant"] and b.train.x.shape[1:] == (3, 16, 16) and len(b.test) == 12
    with pytest.raises(DataUnavailableError, match="train/ and test/"):
        load_dataset(f"imagefolder:{tmp_path / 'nowhere'}")


def test_forget_specs(digits, tmp_path):
    s = make_split(digits, ForgetSpec(classes=(3, 5)))
    assert set(s.train_forget.y.tolist()) == {3, 5} and 3 not in s.train_retain.y.tolist()
    assert set(s.test_forget.y.tolist()) == {3, 5} and len(s.test_forget) + len(s.test_retain) == len(digits.test)
    assert s.split_hash == make_split(digits, ForgetSpec(classes=(5, 3))).split_hash
    r = make_split(digits, ForgetSpec(random=0.1), seed=0)
    assert len(r.train_forget) == round(0.1 * len(digits.train)) and len(r.test_forget) == 0
    assert r.split_hash != make_split(digits, ForgetSpec(random=0.1), seed=1).split_hash
    assert len(make_split(digits, ForgetSpec(random=25)).train_forget) == 25
    f = tmp_path / "idx.txt"
    f.write_text("4, 9\n 4 100\n")
    i = make_split(digits, ForgetSpec(indices_file=str(f)))
    assert i.forget_indices.tolist() == [4, 9, 100]
    assert torch.equal(i.train_forget.x, digits.train.x[[4, 9, 100]])
    np.save(tmp_path / "idx.npy", np.array([1, 2]))
    assert len(make_split(digits, ForgetSpec(indices_file=str(tmp_path / "idx.npy"))).train_forget) == 2


@pytest.mark.parametrize("spec, msg", [
    (dict(classes=(10,)), "out of range"), (dict(classes=tuple(range(10))), "every class"),
    (dict(random=0.0), "selects no sample"), (dict(random=1e9), "nothing would remain"),
])
def test_bad_forget_specs(digits, spec, msg):
    with pytest.raises(UserError, match=msg):
        make_split(digits, ForgetSpec(**spec))


def test_bad_indices_files(digits, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(UserError, match="empty"):
        make_split(digits, ForgetSpec(indices_file=str(empty)))
    big = tmp_path / "big.txt"
    big.write_text("99999")
    with pytest.raises(UserError, match="out of range"):
        make_split(digits, ForgetSpec(indices_file=str(big)))
    with pytest.raises(UserError, match="exactly one"):
        ForgetSpec(classes=(1,), random=0.1)



@pytest.mark.parametrize("case", sorted(index_arrays(1)))
def test_npy_indices_are_whole_numbers_or_a_mask(digits, tmp_path, case):
    """Floats are not truncated, complex numbers not cast, booleans not read as indices 0 and 1: each is
    one UserError naming the file, when the option is read (content) or the split made (range, mask length)."""
    content, msg = index_arrays(len(digits.train))[case]
    path = write_index_file(tmp_path / "idx.npy", content)
    with pytest.raises(UserError) as e:
        make_split(digits, ForgetSpec.from_options(None, None, path))
    assert str(path) in str(e.value) and msg in str(e.value), str(e.value)


def test_a_boolean_npy_is_a_mask(digits, tmp_path):
    mask = np.zeros(len(digits.train), dtype=bool)
    mask[[0, 7, 9]] = True
    np.save(tmp_path / "mask.npy", mask)
    split = make_split(digits, ForgetSpec(indices_file=str(tmp_path / "mask.npy")))
    assert split.forget_indices.tolist() == [0, 7, 9]
    (tmp_path / "huge.txt").write_text("1 " + "9" * 30)
    with pytest.raises(UserError, match="far beyond"):
        ForgetSpec.from_options(None, None, tmp_path / "huge.txt")


@pytest.mark.parametrize("case", sorted(cifar_batches()))
def test_corrupt_cifar_batches_are_one_error_naming_the_file(tmp_path, case):
    content, msg = cifar_batches()[case]
    path = fake_cifar(tmp_path, content)
    with pytest.raises(UserError) as e:
        load_dataset("cifar10", data_dir=tmp_path)
    assert str(path) in str(e.value) and msg in str(e.value) and "\n" not in str(e.value), str(e.value)
