"""The bad-input sweep (tests/integration/test_bad_input.py), grown by the families of issue 30 that enter
through files and repeated options: non-UTF-8 YAML and a key given twice (run configs, bench suites, preset
files), an option that takes one value given twice, report inputs out of their range, bench suite tasks the
dataset cannot hold, a ``tune --db`` that is not a database. Each ends in exit code 2, one ``error:`` line, no
traceback and nothing written, before any work. Also: a rerun leaves no temp file of a killed write behind.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import typer.main
import yaml
from sample_results import sample_results
from test_bad_input import FORGET, WorkStarted, assert_refused, baseline, files, guard, runner  # noqa: F401

from unlearnkit.cli import app
from unlearnkit.results import FORGETTING_QUALITY_SCHEMA

COMMANDS = typer.main.get_command(app).commands
GRID = {"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["finetune"], "seeds": [0]}
NOT_UTF8 = b"dataset: digits\nmethods: [finetune]  # caf\xe9\n"


# --- YAML files: not UTF-8, a key twice ---------------------------------------------------------

def run_config(out) -> str:
    return yaml.safe_dump({"dataset": "digits", "forget_classes": [3], "methods": ["finetune"], "out": str(out)})


def preset_text() -> str:
    return "unlearnkit_preset: 1\nbase: reference\nmethod_params: {finetune: {lr: 0.01}}\n"


YAML_FILES = {
    # name: (which file, its bytes given the run's out folder, fragments of the error line)
    "run config not UTF-8": ("config", lambda out: NOT_UTF8, ["config file", "not UTF-8", "0xe9"]),
    "run config key twice": ("config", lambda out: (run_config(out) + "seed: 0\nseed: 1\n").encode(),
                             ["config file", "key 'seed' appears twice"]),
    "run config nested key twice": ("config", lambda out: (run_config(out) + "recipe: {epochs: 1, epochs: 2}\n")
                                    .encode(), ["key 'epochs' appears twice"]),
    "run config dashed and plain": ("config", lambda out: (run_config(out) + "out: x\n").encode(),
                                    ["key 'out' appears twice"]),
    "suite not UTF-8": ("suite", lambda out: b"suite: caf\xe9\n", ["suite file", "not UTF-8"]),
    "suite key twice": ("suite", lambda out: (yaml.safe_dump({"suite": "t", "grids": [GRID]}) + "suite: u\n").encode(),
                        ["suite file", "key 'suite' appears twice"]),
    "suite grid key twice": ("suite", lambda out: b"grids:\n  - datasets: [digits]\n"
                             b"    tasks: [{forget_classes: [3]}]\n"
                             b"    methods: [finetune]\n    methods: [gradient_ascent]\n",
                             ["key 'methods' appears twice"]),
    "preset not UTF-8": ("preset", lambda out: preset_text().encode() + b"# \xff\n", ["preset file", "not UTF-8"]),
    "preset key twice": ("preset", lambda out: (preset_text() + "base: small\n").encode(),
                         ["preset file", "key 'base' appears twice"]),
    "suite's preset key twice": ("suite-preset", lambda out: (preset_text() + "base: small\n").encode(),
                                 ["preset file", "key 'base' appears twice"]),
}


@pytest.mark.parametrize("case", list(YAML_FILES))
def test_yaml_files_are_utf8_and_give_each_key_once(case, guard, tmp_path, cache_dir):  # noqa: F811
    kind, content, fragments = YAML_FILES[case]
    out = tmp_path / "out"
    path = tmp_path / "in.yaml"
    path.write_bytes(content(out))
    if kind == "config":
        args = ["run", "--config", str(path), "--no-progress"]
    elif kind == "preset":
        args = ["run", "--dataset", "digits", "--forget-classes", "3", "--methods", "finetune", "--preset", str(path),
                "--out", str(out), "--no-progress"]
    else:
        suite = path
        if kind == "suite-preset":
            suite = tmp_path / "suite.yaml"
            suite.write_text(yaml.safe_dump({"suite": "t", "defaults": {"preset": str(path)}, "grids": [GRID]}))
        args = ["bench", str(suite), "--db", str(out / "s.db"), "--out", str(out), "--no-progress"]
    line = assert_refused(runner.invoke(app, args), out, *fragments)
    assert str(path) in line and all(f in line for f in fragments), line


# --- an option that takes one value, given twice ------------------------------------------------

def value_options(cmd) -> dict[str, object]:
    """``{--opt: param}`` of the options of ``cmd`` that take one value (not flags, not meant to repeat)."""
    return {o: p for p in cmd.params if p.param_type_name == "option" and not p.is_flag and not p.multiple
            for o in p.opts}


def repeat_cases():
    cases = []
    shapes = {"plain": "/plain", "ckpt": "c.pt", "suite": "s.yaml", "results": "r.json", "requests": "q.yaml"}
    for name in sorted(set(COMMANDS) - {"list"}):
        options = value_options(COMMANDS[name])
        args = baseline(name, shapes, Path("/out"))
        for i, a in enumerate(args):
            if a in options:
                cases.append(pytest.param(name, a, i, id=f"{name}:{a} twice"))
    return cases


@pytest.mark.parametrize("command,opt,index", repeat_cases())
def test_an_option_given_twice_is_refused(command, opt, index, files, guard, tmp_path):  # noqa: F811
    """Every one-value option of each baseline, given a second time (the same value: still refused, as
    a second value would silently win)."""
    out = tmp_path / "out"
    args = baseline(command, files, out)
    assert args[index] == opt
    result = runner.invoke(app, args + [opt, args[index + 1]])
    assert_refused(result, out, f"{opt} is given more than once")


DIFFERENT = [
    ("run", ["--seed", "0", "--seed", "1"], "--seed"),
    ("run", ["--seed=0", "--seed", "1"], "--seed"),
    ("run", ["--progress", "--no-progress"], "--progress/--no-progress"),
    ("train", ["--dataset", "mnist5k"], "--dataset"),
    ("audit", ["--forget-classes", "4"], "--forget-classes"),
    ("unlearn", ["--method", "gradient_ascent"], "--method"),
    ("tune", ["--trials", "2"], "--trials"),
]


@pytest.mark.parametrize("command,extra,name", DIFFERENT, ids=[f"{c}:{' '.join(e)}" for c, e, _ in DIFFERENT])
def test_two_values_of_one_option_are_refused(command, extra, name, files, guard, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    result = runner.invoke(app, baseline(command, files, out) + extra)
    assert_refused(result, out, f"{name} is given more than once")


def test_a_method_named_twice_in_runs_for_is_refused(files, guard, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    result = runner.invoke(app, baseline("forgetting-quality", files, out) + ["--runs-for", "finetune=3,FT=3"])
    assert_refused(result, out, "--runs-for names finetune twice", "'FT'")


@pytest.mark.parametrize("command,extra", [
    ("audit", lambda f: ["--retrained", f["ckpt"]]),
    ("report", lambda f: ["--results", f["results"]]),
    ("report", lambda f: ["--forgetting-quality", f["fq"], "--forgetting-quality", f["fq"]]),
], ids=["audit --retrained", "report --results", "report --forgetting-quality"])
def test_options_meant_to_repeat_still_repeat(command, extra, files, guard, tmp_path):  # noqa: F811
    fq = tmp_path / "forgetting_quality.json"
    fq.write_text(json.dumps(fq_doc()))
    result = runner.invoke(app, baseline(command, files, tmp_path / "out") + extra({**files, "fq": str(fq)}))
    assert isinstance(result.exception, WorkStarted), (result.exit_code, result.output)


# --- report: inputs out of their range ----------------------------------------------------------

def fq_doc(**task) -> dict:
    return {"schema": FORGETTING_QUALITY_SCHEMA, "config": {"seed": 0},
            "task": {"dataset": "digits", "model": "small_cnn",
                     "forget": {"kind": "classes", "classes": [3], "random": None, "indices_file": None}, **task},
            "methods": {"finetune": {"control": False, "forget_score": 0.5, "final_score": 0.5}}}


def _results(change):
    res = sample_results()
    change(res)
    return res


def _set(d, keys, value):
    *parents, last = keys.split(".")
    for k in parents:
        d = d[k]
    d[last] = value


REPORT = {
    "forget_acc 1e308": ("results", lambda r: _set(r, "models.gradient_ascent.metrics.forget_acc", 1e308),
                         "forget_acc"),
    "forget_acc -50": ("results", lambda r: _set(r, "models.gradient_ascent.metrics.forget_acc", -50), "forget_acc"),
    "mia_auc 2": ("results", lambda r: _set(r, "models.gradient_ascent.metrics.mia_auc", 2), "mia_auc"),
    "mia_efficacy 101": ("results", lambda r: _set(r, "models.original.metrics.mia_efficacy", 101), "mia_efficacy"),
    "verdict banana": ("results", lambda r: _set(r, "models.gradient_ascent.audit.verdict", "banana"), "banana"),
    "class 99 on digits": ("results", lambda r: _set(r, "task.forget.classes", [99]), "not 99"),
    "final_score -5": ("fq", lambda d: _set(d, "methods.finetune.final_score", -5), "final_score"),
    "forget_score 3": ("fq", lambda d: _set(d, "methods.finetune.forget_score", 3), "forget_score"),
    "empty task.forget": ("fq", lambda d: _set(d, "task.forget", {}), "names no forget set"),
    "fq class 99 of 10": ("fq", lambda d: d["task"].update(num_classes=10, forget={"kind": "classes", "classes": [99]}),
                          "not 99"),
}


@pytest.mark.parametrize("case", list(REPORT))
def test_report_inputs_are_range_checked(case, files, guard, tmp_path):  # noqa: F811
    kind, change, name = REPORT[case]
    out = tmp_path / "out"
    path = tmp_path / "in.json"
    if kind == "results":
        path.write_text(json.dumps(_results(change)))
        args = ["report", "--results", str(path), "--out", str(out)]
    else:
        doc = fq_doc()
        change(doc)
        path.write_text(json.dumps(doc))
        args = baseline("report", files, out) + ["--forgetting-quality", str(path)]
    assert_refused(runner.invoke(app, args), out, name)


# --- bench: suite tasks checked before the store and the cell folders ---------------------------

BENCH_TASKS = {
    "class 99 on digits": ({"forget_classes": [99]}, "forget class 99 is out of range"),
    "every class": ({"forget_classes": list(range(10))}, "every class"),
    "missing indices file": ({"forget_indices": "/nonexistent/forget.txt"}, "does not exist"),
    "random: all samples": ({"forget_random": 100000}, "--forget-random"),
}


@pytest.mark.parametrize("case", list(BENCH_TASKS))
def test_bench_suite_tasks_are_checked_before_anything_is_written(case, guard, tmp_path):  # noqa: F811
    task, fragment = BENCH_TASKS[case]
    out = tmp_path / "out"
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"suite": "t", "grids": [{**GRID, "tasks": [task]}]}))
    result = runner.invoke(app, ["bench", str(suite), "--db", str(out / "s.db"), "--out", str(out), "--no-progress"])
    assert_refused(result, out, fragment)
    assert "grid 'grid1'" in result.stderr


# --- tune: a --db that is not a database ----------------------------------------------------------

@pytest.mark.parametrize("content", [b"hello, not a database\n", b"\x00" * 200], ids=["text", "zeros"])
def test_tune_db_that_is_not_sqlite_is_refused(content, files, guard, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    db = tmp_path / "store.db"
    db.write_bytes(content)
    args = baseline("tune", files, out)
    args[args.index("--db") + 1] = str(db)
    assert_refused(runner.invoke(app, args), out, "is not a SQLite database")
    assert db.read_bytes() == content


# --- a rerun leaves no temp file of a killed write ------------------------------------------------

def test_a_rerun_removes_the_temp_files_of_a_killed_write(files, tmp_path):  # noqa: F811
    """kill -9 during an atomic write leaves ``.NAME.XXXXXXXX.tmp``; the next successful write of NAME
    removes it (unlocked: its writer is gone), while a live writer's locked temp file is kept."""
    import fcntl

    out = tmp_path / "out"
    out.mkdir()
    old = time.time() - 3600
    stale = [out / ".report.html.k1ll3d00.tmp", out / ".summary.csv.abcd_123.tmp"]
    for p in stale:
        p.write_text("half a file")
        os.utime(p, (old, old))
    live = out / ".report.md.l1vewr1t.tmp"
    live.write_text("being written")
    os.utime(live, (old, old))
    other = out / ".report.html.notes"  # not a temp file of ours
    other.write_text("kept")
    with open(live) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = runner.invoke(app, ["report", "--results", files["results"], "--out", str(out)])
        assert result.exit_code == 0, result.output
    left = sorted(p.name for p in out.iterdir() if p.name.endswith(".tmp"))
    assert left == [live.name], left
    assert other.read_text() == "kept"
    result = runner.invoke(app, ["report", "--results", files["results"], "--out", str(out)])  # lock released
    assert result.exit_code == 0 and not [p for p in out.rglob("*.tmp")], sorted(os.listdir(out))
