"""Single-process checks of the data-parallel pieces (the two-process runs are in
tests/integration/test_torchrun.py)."""
import pytest
import torch
from typer.testing import CliRunner

from unlearnkit import distributed
from unlearnkit.cli import app
from unlearnkit.data.arrays import ArrayData, Augment, shard_bounds
from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS


@pytest.mark.parametrize("n,world", [(15, 2), (64, 2), (1, 2), (7, 3), (2, 4)])
def test_shard_bounds_cover_the_batch_contiguously(n, world):
    bounds = [shard_bounds(n, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1
    assert [list(range(lo, hi)) for lo, hi in bounds] == [t.tolist() for t in torch.arange(n).tensor_split(world)]


def test_ranks_rows_reassemble_the_one_process_batches():
    """Same permutation, augmentation drawn for the whole global batch: the ranks' rows side by side
    are exactly the single-process batch, an uneven and an empty share included, and every rank's
    generator ends in the same state."""
    g = torch.Generator().manual_seed(1)
    data = ArrayData(torch.randint(0, 256, (37, 1, 6, 6), dtype=torch.uint8, generator=g),
                     torch.arange(37) % 5, (0.5,), (0.25,))
    aug = Augment(crop_padding=2, hflip=True)
    kw = dict(shuffle=True, augment=aug)

    def run(shard=None):
        gen = torch.Generator().manual_seed(0)
        return list(data.batches(9, generator=gen, shard=shard, **kw)), gen.get_state()

    whole, state = run()
    world = 3
    parts = [run((r, world)) for r in range(world)]
    assert all(torch.equal(s, state) for _, s in parts)
    for i, (x, y) in enumerate(whole):
        assert torch.equal(torch.cat([p[0][i][0] for p in parts]), x)
        assert torch.equal(torch.cat([p[0][i][1] for p in parts]), y)
    assert len(whole[-1][1]) == 1 and len(parts[2][0][-1][1]) == 0  # 37 = 4 x 9 + 1: ranks 1, 2 hold none


def test_one_process_is_untouched():
    w = distributed.world()
    assert w.size == 1 and w.is_main
    t = torch.arange(4.0)
    assert distributed.sum_over_ranks(t) is t and distributed.broadcast_torch({"a": 1}) == {"a": 1}
    assert distributed.local_rows(t) is t and distributed.global_batch_len(t) == 4
    assert distributed.batch_mean(torch.tensor(2.5)) == 2.5


@pytest.fixture
def two_processes(monkeypatch):
    monkeypatch.setattr(distributed, "world", lambda: distributed.World(rank=0, size=2))


def test_methods_that_cannot_run_data_parallel_say_so(two_processes):
    with pytest.raises(UserError, match=r"purge cannot run data-parallel \(2 processes\): A-GEM"):
        METHODS.get("purge").check_distributed()
    METHODS.get("finetune").check_distributed()  # a plain loop method runs


def test_run_with_a_non_distributed_method_stops_with_one_line(two_processes, tmp_path):
    r = CliRunner().invoke(app, ["run", "--dataset", "digits", "--forget-classes", "3", "--methods", "finetune,ssd",
                                 "--out", str(tmp_path / "r"), "--no-audit"])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ssd cannot run data-parallel (2 processes)")
    assert not (tmp_path / "r").exists()


def test_supported_methods_are_the_documented_ones():
    supported = {n for n in METHODS.names() if METHODS.get(n).distributed}
    assert {"finetune", "gradient_ascent", "random_label", "salun", "l1_sparse", "amnesiac", "bad_teacher",
            "scrub", "boundary_shrink", "boundary_expand", "retrain"} <= supported
    assert not supported & {"purge", "ssd", "fisher_forgetting", "influence", "tarf", "duck", "contrastive",
                            "cola", "ec", "unsir", "ec+duck"}


def _stream(n=10, batch=4):
    data = ArrayData(torch.zeros(n, 1, 1, 1), torch.zeros(n, dtype=torch.long), (0.0,), (1.0,))
    return distributed.sharded_batches(data, batch, shuffle=False)


def test_a_stream_is_seen_only_inside_its_scope_and_dropped_with_it(two_processes):
    with distributed.stream_scope():
        it = _stream()
        next(it)
        assert distributed.current_step() == distributed.Step(0, 2, 4)  # rank 0 of 2 holds rows 0..1
        next(it)
        assert distributed.current_step().n_global == 4
        with distributed.stream_scope():  # a nested run starts with no stream
            assert distributed.current_step() is None
        assert distributed.current_step() is not None
    assert distributed.current_step() is None  # the unfinished stream went with its scope
    it.close()  # finalising it later touches only its own scope's record


def test_two_open_streams_are_refused_and_other_threads_see_neither(two_processes):
    import threading

    seen = []
    with distributed.stream_scope():
        a, b = _stream(), _stream()
        next(a), next(b)
        with pytest.raises(RuntimeError, match="two sharded batch streams"):
            distributed.current_step()
        t = threading.Thread(target=lambda: seen.append(distributed.current_step()))
        t.start()
        t.join()
    assert seen == [None]
