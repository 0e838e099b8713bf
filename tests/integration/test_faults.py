"""Faults of the machine, not of the input (issue 44): a full disk or a read-only target, and writers that run at
the same time. A write the file system refuses ends in one ``error:`` line and exit code 1 (no traceback), the
partial output is removed (an atomic write's temp file, the audit's other files), no lock file is left, and the
model cache works afterwards. A second ``stream`` into the same folder is refused; two ``tune`` on one new
database both work, and a trial whose process was killed is marked failed when the study is opened again.

A full disk is simulated in-process: the file objects the atomic writer opens refuse every write after a
budget of writes (``OSError(ENOSPC)``, as a full ``write(2)`` does), so the real code paths run, ``torch.save``'s
own wrapping of the error included.
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import unlearnkit.checkpoints as checkpoints
from unlearnkit.cli import app
from unlearnkit.errors import UserError, WriteFailed

runner = CliRunner()


class FullDisk:
    """Patches ``os.fdopen`` in :mod:`unlearnkit.checkpoints`: the ``budget`` first atomic writes go through,
    every later one fails with ENOSPC on its first ``write`` (counted per file)."""

    def __init__(self, monkeypatch, budget: int = 0) -> None:
        self.budget, self.opened = budget, 0
        real = os.fdopen

        def fdopen(fd, *args, **kwargs):
            f = real(fd, *args, **kwargs)
            self.opened += 1
            return f if self.opened <= self.budget else _Full(f)

        monkeypatch.setattr(checkpoints.os, "fdopen", fdopen)


class _Full:
    def __init__(self, f) -> None:
        self._f = f

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def temps(folder: Path) -> list[str]:
    """Leftovers of a write: temp files, staging folders, lock files."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.name.endswith((".tmp", ".lock")) or ".staging." in p.name)


def one_fault_line(result) -> str:
    """Exit code 1 and one ``error:`` line, the last on stderr (what the work printed before it stays), no
    traceback."""
    assert result.exit_code == 1, (result.exit_code, result.output, repr(result.exception))
    lines = result.stderr.splitlines()
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    assert "Traceback" not in result.output and "No space left on device" in errors[0], lines
    return errors[0]


# --- the atomic writer ---------------------------------------------------------------------------

def test_a_full_disk_in_torch_save_is_a_write_failed_naming_the_file(tmp_path, monkeypatch):
    """torch.save turns the write's OSError into a RuntimeError; the writer still says ENOSPC, names the file,
    removes its temp file and leaves the old content in place."""
    path = tmp_path / "m.pt"
    checkpoints.atomic_write_bytes(path, lambda f: torch.save({"a": torch.ones(3)}, f))
    FullDisk(monkeypatch)
    with pytest.raises(WriteFailed) as info:
        checkpoints.atomic_write_bytes(path, lambda f: torch.save({"a": torch.zeros(10_000)}, f))
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert str(info.value) == f"cannot write {path}: No space left on device"
    assert isinstance(info.value, OSError) and os.listdir(tmp_path) == ["m.pt"]
    assert torch.equal(torch.load(path, weights_only=True)["a"], torch.ones(3))


def test_write_together_leaves_all_files_or_none(tmp_path, monkeypatch):
    out = tmp_path / "audit"

    def three(folder: Path) -> dict:
        paths = {k: folder / f"audit.{k}" for k in ("json", "md", "html")}
        for p in paths.values():
            checkpoints.atomic_write_text(p, "x")
        return paths

    FullDisk(monkeypatch, budget=2)  # the third file hits the full disk
    with pytest.raises(WriteFailed, match=r"audit\.html: No space left"):
        checkpoints.write_together(out, three)
    assert list(out.iterdir()) == []
    monkeypatch.undo()
    got = checkpoints.write_together(out, three)
    assert sorted(p.name for p in out.iterdir()) == ["audit.html", "audit.json", "audit.md"]
    assert got["md"] == out / "audit.md"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EDQUOT])
def test_the_cli_says_a_refused_write_in_one_line(code):
    from unlearnkit.cli.app import write_fault

    line = write_fault(WriteFailed(code, os.strerror(code), "/x/m.pt"))
    assert line.startswith(f"cannot write /x/m.pt: {os.strerror(code)}; nothing partial was left")
    assert write_fault(OSError(code, os.strerror(code), "/y")).startswith(os.strerror(code))
    assert write_fault(OSError(errno.ENOENT, "gone")) is None and write_fault(ValueError("x")) is None


# --- the commands on a full disk -----------------------------------------------------------------

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, digits_original):
    path = tmp_path_factory.mktemp("faults") / "orig.pt"
    checkpoints.save_checkpoint(digits_original, path, {"kind": "original"})
    return path


def test_unlearn_on_a_full_disk_is_one_line_and_leaves_nothing(checkpoint, tmp_path, monkeypatch, cache_dir):
    out = tmp_path / "out"
    out.mkdir()
    FullDisk(monkeypatch)
    r = runner.invoke(app, ["unlearn", "--checkpoint", str(checkpoint), "--dataset", "digits", "--forget-classes", "3",
                            "--method", "finetune", "--param", "epochs=1", "--out", str(out / "u.pt"),
                            "--no-progress"])
    line = one_fault_line(r)
    assert str(out / "u.pt") in line and list(out.iterdir()) == []


@pytest.fixture(scope="module")
def reference_checkpoint(tmp_path_factory, digits_retrain):
    path = tmp_path_factory.mktemp("faults") / "retrain.pt"
    checkpoints.save_checkpoint(digits_retrain, path, {"kind": "retrain"})
    return path


def test_audit_on_a_full_disk_leaves_no_lone_audit_json(checkpoint, reference_checkpoint, tmp_path, monkeypatch,
                                                        cache_dir):
    """audit.json, audit.md and audit.html are written together: the third failing removes the first two."""
    out = tmp_path / "audit"
    FullDisk(monkeypatch, budget=2)
    ck = str(checkpoint)
    r = runner.invoke(app, ["audit", "--original", ck, "--unlearned", ck, "--retrained", str(reference_checkpoint),
                            "--dataset", "digits", "--forget-classes", "3", "--n-splits", "2", "--no-resurface",
                            "--out", str(out)])
    line = one_fault_line(r)
    assert "audit.html" in line and ".staging." not in line
    assert not out.exists() or list(out.iterdir()) == [], sorted(os.listdir(out))


def test_the_model_cache_on_a_full_disk_leaves_no_lock_and_works_afterwards(digits_split, tmp_path, monkeypatch):
    from unlearnkit.loop import Recipe
    from unlearnkit.training import reference_model

    cache = tmp_path / "cache"
    recipe = Recipe(lr=0.05, epochs=1, batch_size=64)
    FullDisk(monkeypatch)
    with pytest.raises(WriteFailed, match="No space left"):
        reference_model("original", digits_split, "small_cnn", recipe, cache_dir=cache, progress=False)
    assert temps(cache) == [] and list(cache.iterdir()) == []  # no .lock, no temp file, no half a model
    monkeypatch.undo()
    ref = reference_model("original", digits_split, "small_cnn", recipe, cache_dir=cache, progress=False)
    assert not ref.cached and [p.suffix for p in cache.iterdir()] == [".pt"]
    assert reference_model("original", digits_split, "small_cnn", recipe, cache_dir=cache, progress=False).cached


def stream_args(requests: Path, out: Path) -> list[str]:
    return ["stream", "--requests", str(requests), "--dataset", "digits", "--methods", "finetune",
            "--references", "1", "--no-audit", "--out", str(out), "--no-progress"]


def test_stream_on_a_full_disk_is_one_line(tmp_path, monkeypatch, cache_dir):
    req = tmp_path / "requests.yaml"
    req.write_text("- classes: [3]\n")
    out = tmp_path / "out"
    from unlearnkit.training import default_recipe, reference_model

    for kind in ("original", "retrain"):  # the references first (cached), so the full disk hits the step's write
        from unlearnkit import ForgetSpec, load_dataset, make_split

        split = make_split(load_dataset("digits"), ForgetSpec(classes=(3,)))
        reference_model(kind, split, "small_cnn", default_recipe("digits", "small_cnn"), cache_dir=cache_dir,
                        progress=False)
    FullDisk(monkeypatch)
    line = one_fault_line(runner.invoke(app, stream_args(req, out)))
    assert "finetune.pt" in line, line
    assert temps(out) == [], temps(out)


# --- concurrent writers --------------------------------------------------------------------------

def test_a_second_stream_into_the_same_folder_is_refused(tmp_path, cache_dir):
    req = tmp_path / "requests.yaml"
    req.write_text("- classes: [3]\n")
    out = tmp_path / "out"
    out.mkdir()
    from unlearnkit.stream import LOCK_FILE

    with checkpoints.file_lock(out / LOCK_FILE):  # the first stream, running
        r = runner.invoke(app, stream_args(req, out))
        assert r.exit_code == 2, r.output
        assert r.stderr.splitlines() == [f"error: another unlearnkit stream is writing {out}: wait for it to finish, "
                                         f"or give another --out (process {os.getpid()})"], r.stderr
        assert os.listdir(out) == [LOCK_FILE]
    assert os.listdir(out) == []  # released: the lock file goes with it


def test_a_lock_is_exclusive_and_leaves_no_file(tmp_path):
    path = tmp_path / "x.lock"
    with checkpoints.file_lock(path):
        assert path.read_text().strip() == str(os.getpid())
        with pytest.raises(checkpoints.LockBusy, match="busy here"):
            with checkpoints.file_lock(path, wait=False, busy="busy here"):
                pass
    assert not path.exists()
    order = []

    def hold(i):
        with checkpoints.file_lock(path):
            order.append(("in", i))
            order.append(("out", i))

    threads = [threading.Thread(target=hold, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert all(order[k][0] == "in" and order[k + 1] == ("out", order[k][1]) for k in range(0, 8, 2)), order
    assert not path.exists()


def test_tune_without_optuna_says_how_to_install_it(tmp_path, monkeypatch):
    """optuna is the `tune` extra (pyproject), not a dependency: without it, one line naming the extra."""
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` raises ImportError
    out = tmp_path / "out"
    r = runner.invoke(app, ["tune", "--dataset", "digits", "--forget-classes", "3", "--method", "ssd", "--db",
                            str(out / "s.db"), "--out", str(out / "t.yaml")])
    assert r.exit_code == 2 and r.stderr.splitlines() == [
        "error: unlearnkit tune needs Optuna, which is not installed: pip install 'unlearnkit[tune]' (or pip "
        "install optuna)"], r.output
    assert not out.exists()


def test_pyproject_declares_the_tune_extra():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's TOML reader")
    meta = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("optuna") for d in meta["optional-dependencies"]["tune"])
    assert not any(d.startswith("optuna") for d in meta["dependencies"])


optuna = pytest.importorskip("optuna", reason="the tune tests need optuna (pip install 'unlearnkit[tune]')")


def test_two_tunes_on_one_new_database_both_work(tmp_path):
    """Both create Optuna's tables at once: one died on `UNIQUE constraint failed: alembic_version.version_num`
    (or `table studies already exists`); the lock beside the store serialises the creation."""
    from unlearnkit import tune

    def open_it(db, barrier, studies, errors):
        try:
            barrier.wait()
            studies.append(tune.create_study(db, "s", 0))
        except BaseException as e:  # noqa: BLE001 - collected, asserted below
            errors.append(f"{type(e).__name__}: {e}")

    for attempt in range(3):  # the race needs both at the same moment: a few new databases
        db = tmp_path / f"new{attempt}.db"
        errors, studies = [], []
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=open_it, args=(db, barrier, studies, errors)) for _ in range(2)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert errors == [] and len(studies) == 2
        assert studies[0]._study_id == studies[1]._study_id
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(db.name)) == [db.name]


def test_a_killed_trial_is_marked_failed_when_the_study_is_opened_again(tmp_path):
    from unlearnkit import tune

    db = tmp_path / "s.db"
    study = tune.create_study(db, "s", 0)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = {**tune.owner(), "pid": int(dead.stdout), "pid_started": "0"}
    killed, alive, foreign = study.ask(), study.ask(), study.ask()
    study._storage.set_trial_system_attr(killed._trial_id, "unlearnkit_owner", gone)
    study._storage.set_trial_system_attr(alive._trial_id, "unlearnkit_owner", tune.owner())
    study._storage.set_trial_system_attr(foreign._trial_id, "unlearnkit_owner", {**gone, "host": "elsewhere"})
    again = tune.create_study(db, "s", 0)  # the rerun after kill -9
    states = {t.number: t.state for t in again.trials}
    assert states[killed.number] == optuna.trial.TrialState.FAIL
    assert states[alive.number] == states[foreign.number] == optuna.trial.TrialState.RUNNING


def test_a_database_with_another_programs_studies_table_is_one_line(tmp_path):
    import sqlite3

    db = tmp_path / "other.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE studies (id INTEGER PRIMARY KEY, name TEXT)")
    out = tmp_path / "out"
    r = runner.invoke(app, ["tune", "--dataset", "digits", "--forget-classes", "3", "--method", "ssd", "--db", str(db),
                            "--out", str(out / "t.yaml"), "--no-progress"])
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"error: --db {db} cannot hold the study") and "study_name" in line, line
    assert not out.exists() and "Traceback" not in r.output
    with pytest.raises(UserError, match="cannot hold the study"):
        from unlearnkit import tune

        tune.create_study(db, "s", 0)
