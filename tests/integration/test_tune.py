"""``unlearnkit tune``: the validation split stands in for the test set (which is never read), the study
resumes from the SQLite store, the preset file it writes is what ``run`` and ``bench`` then use."""
from __future__ import annotations

import json

import pytest
import torch
import yaml
from typer.testing import CliRunner

from unlearnkit.cli import app
from unlearnkit.config import RunConfig
from unlearnkit.errors import UserError
from unlearnkit.methods.tuned import apply_preset_file, preset_file_text, read_preset_file

optuna = pytest.importorskip("optuna", reason="unlearnkit tune needs optuna (pip install 'unlearnkit[tune]')")
from unlearnkit import tune  # noqa: E402  (after the importorskip)

runner = CliRunner()


def test_validation_split_takes_the_test_sets_place(digits_split):
    v = tune.validation_split(digits_split)
    assert torch.equal(v.test.x, digits_split.val.x) and torch.equal(v.test.y, digits_split.val.y)
    assert set(v.test_forget.y.tolist()) == {3} and 3 not in set(v.test_retain.y.tolist())
    assert len(v.test_forget) + len(v.test_retain) == len(digits_split.val)
    assert v.test.index.tolist() == list(range(len(digits_split.val)))  # rows index the stand-in test set
    assert v.train_forget is digits_split.train_forget and v.val is digits_split.val


class Poisoned:
    """A data part whose every read fails: what the search must never touch."""

    def __init__(self, real):
        self.real = real

    def __len__(self):
        return len(self.real)

    def __getattr__(self, name):
        raise AssertionError(f"the test set was read ({name})")


def test_a_trial_never_reads_the_test_set(cache_dir):
    cfg = RunConfig(dataset="digits", model="small_cnn", forget_classes=[3], methods=["ssd"], cache_dir=str(cache_dir),
                    out=str(cache_dir / "tune-out"), audit=False)
    task = tune.prepare_task(cfg, progress=False)
    task.split.test, task.split.test_forget, task.split.test_retain = (Poisoned(task.split.test),
                                                                       Poisoned(task.split.test_forget),
                                                                       Poisoned(task.split.test_retain))
    score = tune.trial_score(task, "ssd", "reference", {"selection_weighting": 3.0, "dampening_constant": 1.0})
    assert not score["pruned"] and score["objective"] >= score["gap"] >= 0
    assert score["verdict"] in ("erased", "suppressed", "not_forgotten", "collapsed", "inconclusive")
    assert tune.trial_score(task, "ssd", "reference", {"selection_weighting": 3.0}, report=lambda g: True)["pruned"]


def test_tune_writes_a_preset_resumes_and_run_uses_it(tmp_path, cache_dir):
    db, out = tmp_path / "store.db", tmp_path / "tuned.yaml"
    args = ["tune", "--dataset", "digits", "--forget-classes", "3", "--method", "SSD", "--db", str(db), "--out",
            str(out), "--cache-dir", str(cache_dir), "--no-progress"]
    r = runner.invoke(app, [*args, "--trials", "2"])
    assert r.exit_code == 0, r.output
    assert "0 of 2 trials finished before" in r.output and r.output.count("trial ") >= 2
    found = read_preset_file(out)
    best = found["method_params"]["ssd"]
    assert set(best) == {"selection_weighting", "dampening_constant"} and found["base"] == "reference"
    assert found["tuned_on"]["split"].startswith("val") and found["tuned_on"]["trials"] == 2

    # a killed run leaves a trial RUNNING: the rerun does not count it, and continues to the total
    study = optuna.load_study(study_name=found["tuned_on"]["study"], storage=f"sqlite:///{db}")
    study.ask()
    r = runner.invoke(app, [*args, "--trials", "3"])
    assert r.exit_code == 0, r.output
    assert "2 of 3 trials finished before" in r.output
    study = optuna.load_study(study_name=found["tuned_on"]["study"], storage=f"sqlite:///{db}")
    assert tune.finished(study) == 3
    # the rerun drew new points: a sampler seeded again as before would repeat trial 0's
    points = [tuple(sorted(t.params.items())) for t in study.trials if t.params]
    assert len(points) == len(set(points)) == 3, points

    best = read_preset_file(out)["method_params"]["ssd"]
    r = runner.invoke(app, ["run", "--dataset", "digits", "--forget-classes", "3", "--methods", "ssd", "--preset",
                            str(out), "--no-audit", "--cache-dir", str(cache_dir), "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    used = json.loads((tmp_path / "run" / "results.json").read_text())["models"]["ssd"]["hyperparameters"]
    assert used["selection_weighting"] == pytest.approx(best["selection_weighting"])
    assert used["dampening_constant"] == pytest.approx(best["dampening_constant"])


def test_preset_files_merge_under_explicit_values_and_refuse_bad_files(tmp_path):
    p = tmp_path / "t.yaml"
    p.write_text(preset_file_text("small", "ssd", {"selection_weighting": 2.5, "dampening_constant": 0.5}, {}))
    cfg = RunConfig(dataset="digits", methods=["ssd", "finetune"], preset=str(p),
                    method_params={"SSD": {"dampening_constant": 1.0}})
    assert cfg.preset == "small"
    assert cfg.method_params == {"ssd": {"selection_weighting": 2.5, "dampening_constant": 1.0}}
    assert apply_preset_file(str(p), ["finetune"], {}, str) == ("small", {})  # ssd not run: not applied
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"base": "small"}))
    with pytest.raises(UserError, match="not an unlearnkit preset file"):
        read_preset_file(bad)
    with pytest.raises(UserError, match="does not exist"):
        RunConfig(dataset="digits", methods=["ssd"], preset=str(tmp_path / "missing.yaml"))


def test_a_bench_suite_takes_a_preset_file(tmp_path):
    from unlearnkit.bench.grid import expand

    p = tmp_path / "t.yaml"
    p.write_text(preset_file_text("reference", "ssd", {"selection_weighting": 2.5}, {}))
    suite = {"suite": "s", "defaults": {"preset": str(p)},
             "grids": [{"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["ssd", "finetune"],
                        "seeds": [0]}]}
    cells = {c.method: c for c in expand(suite, "s") if c.kind == "method"}
    assert cells["ssd"].config["method_params"] == {"ssd": {"selection_weighting": 2.5}}
    assert cells["ssd"].config["preset"] == "reference" and cells["finetune"].config["method_params"] == {}


def test_tune_refuses_methods_without_a_search_space_and_bad_out(tmp_path):
    r = runner.invoke(app, ["tune", "--dataset", "digits", "--forget-classes", "3", "--method", "purge", "--out",
                            str(tmp_path / "t.yaml")])
    assert r.exit_code == 2 and "declares no SEARCH_SPACE" in r.output and "ssd" in r.output
    r = runner.invoke(app, ["tune", "--dataset", "digits", "--forget-classes", "3", "--method", "ssd", "--out",
                            str(tmp_path / "t.json")])
    assert r.exit_code == 2 and "must name a .yaml file" in r.output


# --- resuming and sharing a study: the sampler, checked without training (a made-up objective) -------

SPACE = {"x": optuna.distributions.FloatDistribution(1.0, 20.0, log=True),
         "y": optuna.distributions.FloatDistribution(0.1, 1.0, log=True)}


def made_up(trial) -> float:
    return trial.suggest_float("x", 1.0, 20.0, log=True) - trial.suggest_float("y", 0.1, 1.0, log=True)


def open_study(db, seed=0):
    """The study as one `unlearnkit tune` process opens it: its own storage and sampler."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(study_name="s", storage=tune.storage(db), sampler=tune.sampler(seed),
                               load_if_exists=True)


def points(study) -> list[tuple]:
    return [tuple(sorted(t.params.items())) for t in study.trials if t.params]


def test_a_rerun_draws_new_points_and_the_same_study_again_the_same_ones(tmp_path):
    first = open_study(tmp_path / "a.db")
    first.optimize(made_up, n_trials=4)
    again = open_study(tmp_path / "a.db")  # a rerun after kill -9: a new process, a new sampler
    again.optimize(made_up, n_trials=4)
    p = points(again)
    assert len(p) == len(set(p)) == 8, p
    fresh = open_study(tmp_path / "b.db")  # the same search from scratch: the same points, in order
    fresh.optimize(made_up, n_trials=8)
    assert points(fresh) == p


def test_two_processes_on_one_study_draw_different_points(tmp_path):
    a, b = open_study(tmp_path / "s.db"), open_study(tmp_path / "s.db")
    ta, tb = a.ask(SPACE), b.ask(SPACE)  # both started with the same study, as two processes would
    assert ta.number != tb.number and ta.params != tb.params


def test_a_point_another_trial_holds_is_not_evaluated_again(tmp_path, monkeypatch):
    calls = []

    def score(task, method, preset, params, report=None):
        calls.append(params)
        return {"gap": 1.0, "objective": 1.0, "pruned": False}

    monkeypatch.setattr(tune, "trial_score", score)
    study = open_study(tmp_path / "s.db")
    objective = tune.objective_for(None, "ssd", "reference")
    point = {"selection_weighting": 3.0, "dampening_constant": 0.5}
    study.enqueue_trial(point)
    study.optimize(objective, n_trials=1)
    running = study.ask()  # another process, evaluating the same point right now
    running.suggest_float("selection_weighting", 1.0, 20.0, log=True)
    study.enqueue_trial({"selection_weighting": 7.0, "dampening_constant": 0.2})
    study.enqueue_trial(point)  # drawn again (by a rerun or the other process)
    study.optimize(objective, n_trials=2)
    assert calls == [point, {"selection_weighting": 7.0, "dampening_constant": 0.2}]
    last = study.trials[-1]
    assert last.state == optuna.trial.TrialState.PRUNED and last.user_attrs["duplicate_of"] == 0


@pytest.mark.parametrize("name", ["a?b.db", "c#d %25 {e}.db"])
def test_the_db_path_is_taken_literally(tmp_path, name):
    study = open_study(tmp_path / name)
    study.optimize(made_up, n_trials=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    assert len(open_study(tmp_path / name).trials) == 1


def test_a_db_that_is_not_sqlite_is_one_line_before_any_work(tmp_path):
    db = tmp_path / "notes.db"
    db.write_text("not a database\n")
    out = tmp_path / "t.yaml"
    r = runner.invoke(app, ["tune", "--dataset", "digits", "--forget-classes", "3", "--method", "ssd", "--db", str(db),
                            "--out", str(out)])
    assert r.exit_code == 2 and r.stderr.splitlines() == [f"error: --db {db} is not a SQLite database; give the "
                                                          f"results store (or a new file)"], r.output
    assert db.read_text() == "not a database\n" and not out.exists()


def test_bench_dry_run_reads_a_store_only_tune_has_written(tmp_path):
    db = tmp_path / "unlearnkit.db"
    open_study(db).optimize(made_up, n_trials=1)
    suite = tmp_path / "suite.yaml"
    grid = {"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["finetune"]}
    suite.write_text(yaml.safe_dump({"suite": "t", "grids": [grid]}))
    before = sorted(p.name for p in tmp_path.iterdir())
    r = runner.invoke(app, ["bench", str(suite), "--db", str(db), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "t: 2 cells, 0 finished" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # read only: nothing beside the store
