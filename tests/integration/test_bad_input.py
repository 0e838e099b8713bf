"""Every bad value a user can type ends in one line: exit code 2, one ``error:`` line on stderr, no
traceback, nothing created under the output path, and no work started.

The sweep walks every option of every command (read from the CLI itself, so a new option is swept
the day it is added) and tries bad values of its type: text that is not a number, 1.5 for a whole
number, NaN and infinities, a negative where none is allowed, a path below a regular file, a path in
an unwritable place, and text full of rich markup and mathtext for names. Each command starts from a
baseline that is valid (checked: it reaches the work), with one option replaced.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import shutil
import stat
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

from unlearnkit.cli import app

runner = CliRunner()
COMMANDS = typer.main.get_command(app).commands
WEIRD = "[red]x$y$"  # rich markup and matplotlib mathtext; no command takes it as a valid value


class WorkStarted(Exception):
    """Raised by the guard where a command would start training, auditing or reporting."""


@pytest.fixture
def guard(monkeypatch):
    """Stop every command where its work begins; a bad value must be refused before that."""

    def stop(*args, **kwargs):
        raise WorkStarted

    # import every module first: one imported while patched would keep ``stop`` as its own name for good
    for module in ("unlearnkit.training", "unlearnkit.runner", "unlearnkit.audit.user", "unlearnkit.bench.runner",
                   "unlearnkit.report.build", "unlearnkit.forgetting_quality_experiment", "unlearnkit.methods.base"):
        importlib.import_module(module)
    for target in ("unlearnkit.training.reference_model", "unlearnkit.runner.reference_model",
                   "unlearnkit.audit.user._audit", "unlearnkit.runner.audit_model",
                   "unlearnkit.bench.runner.run_bench",
                   "unlearnkit.report.build.make_report", "unlearnkit.forgetting_quality_experiment._reference",
                   "unlearnkit.methods.base.UnlearningMethod.unlearn"):
        monkeypatch.setattr(target, stop)


@pytest.fixture(scope="module")
def files(tmp_path_factory, digits_original, cache_dir):
    """Valid inputs for the baselines: a checkpoint, a suite, a results.json, a plain file."""
    from sample_results import sample_results

    from unlearnkit.checkpoints import save_checkpoint

    d = tmp_path_factory.mktemp("inputs")
    ckpt = d / "model.pt"
    save_checkpoint(digits_original, ckpt, {"kind": "original"})
    suite = d / "suite.yaml"
    grid = {"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["finetune"], "seeds": [0]}
    suite.write_text(yaml.safe_dump({"suite": "t", "grids": [grid]}))
    results = d / "results.json"
    results.write_text(json.dumps(sample_results()))
    plain = d / "plain.txt"
    plain.write_text("a regular file\n")
    requests = d / "requests.yaml"
    requests.write_text("- classes: [3]\n")
    return {"ckpt": str(ckpt), "suite": str(suite), "results": str(results), "plain": plain,
            "requests": str(requests)}


def baseline(command: str, files: dict, out: Path) -> list[str]:
    """A valid call of ``command`` whose outputs all go under ``out`` (which does not exist yet)."""
    ck = files["ckpt"]
    return {
        "list": ["list", "methods"],
        "train": ["train", "--dataset", "digits", "--out", str(out / "m.pt")],
        "run": ["run", "--dataset", "digits", "--forget-classes", "3", "--methods", "finetune", "--out", str(out),
                "--no-progress"],
        "audit": ["audit", "--original", ck, "--unlearned", ck, "--retrained", ck, "--dataset", "digits",
                  "--forget-classes", "3", "--out", str(out)],
        "bench": ["bench", files["suite"], "--db", str(out / "store.db"), "--out", str(out), "--no-progress"],
        "report": ["report", "--results", files["results"], "--out", str(out)],
        "forgetting-quality": ["forgetting-quality", "--dataset", "digits", "--forget-classes", "3", "--methods",
                               "finetune", "--runs", "3", "--out", str(out), "--no-progress"],
        "unlearn": ["unlearn", "--checkpoint", ck, "--dataset", "digits", "--forget-classes", "3", "--method",
                    "finetune", "--out", str(out / "u.pt")],
        "tune": ["tune", "--dataset", "digits", "--forget-classes", "3", "--method", "ssd", "--trials", "1",
                 "--db", str(out / "store.db"), "--out", str(out / "t.yaml"), "--no-progress"],
        "stream": ["stream", "--requests", files["requests"], "--dataset", "digits", "--methods", "finetune",
                   "--references", "1", "--out", str(out), "--no-progress"],
    }[command]


#: options that take any value of their type by design, with the reason
FREE = {
    ("report", "--title"): "free text, printed literally (test_user_text_is_printed_literally)",
    ("*", "--data-dir"): "the bundled datasets never read it; torchvision datasets report a missing folder",
}
#: giving one forget option replaces the baseline's
FORGET = ("--forget-classes", "--forget-random", "--forget-indices", "--forget-flipped")


def hint_of(cmd, name: str):
    """The Python type of a command's parameter (Optional[X] and List[X] give X)."""
    fn = inspect.unwrap(cmd.callback)
    hint = typing.get_type_hints(fn)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def bad_values(cmd, param, files) -> list[str]:
    kind = hint_of(cmd, param.name)
    if kind is int:
        return ["abc", "1.5", "-2"]
    if kind is float:
        return ["abc", "nan", "inf", "-inf", "-2"]
    if kind is Path:
        return [str(files["plain"] / "below-a-file"), "/proc/unlearnkit-nowhere/x"]
    if kind is str:
        return [WEIRD]
    return []  # flags


def sweep_cases():
    plain = {"plain": Path("/plain-file")}  # the values' shapes only; the fixture makes the real paths
    cases = []
    for name, cmd in sorted(COMMANDS.items()):
        for param in cmd.params:
            if param.name == "help" or getattr(param, "is_flag", False):
                continue
            opt = param.opts[0] if param.param_type_name == "option" else None
            if (name, opt) in FREE or ("*", opt) in FREE:
                continue
            for i, value in enumerate(bad_values(cmd, param, plain)):
                cases.append(pytest.param(name, param.name, opt, i, id=f"{name}:{opt or param.name}={value}"))
    return cases


def replace_option(args: list[str], cmd, param, opt: str | None, value: str) -> list[str]:
    if opt is None:  # a positional argument: the baseline's (only) one is replaced
        positional = [i for i, a in enumerate(args[1:], 1) if not a.startswith("-") and
                      (i == 1 or not args[i - 1].startswith("--") or _is_flag(cmd, args[i - 1]))]
        out = list(args)
        out[positional[0]] = value
        return out
    drop = {opt} | ({o for o in FORGET if o != opt} if opt in FORGET else set())
    return _without(args, drop) + [f"{opt}={value}"]


def _is_flag(cmd, token: str) -> bool:
    return any(token in p.opts or token in getattr(p, "secondary_opts", []) for p in cmd.params
               if getattr(p, "is_flag", False))


def assert_refused(result, out: Path, *names: str) -> str:
    """Exit 2, one ``error:`` line naming the option or the value, no traceback, nothing written."""
    assert not isinstance(result.exception, WorkStarted), "the bad value was not refused before the work began"
    assert result.exit_code == 2, (result.exit_code, result.output, repr(result.exception))
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    assert not out.exists(), f"{out} was created"
    line = lines[0].lower()
    assert any(n.lower() in line for n in names if n), (names, lines[0])
    return lines[0]


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"list"}))
def test_the_baselines_reach_the_work(command, files, guard, tmp_path):
    """The sweep's baselines are valid: without a bad value each command gets to its work."""
    result = runner.invoke(app, baseline(command, files, tmp_path / "out"))
    assert isinstance(result.exception, WorkStarted), (result.exit_code, result.output)


@pytest.mark.parametrize("command,pname,opt,index", sweep_cases())
def test_every_option_refuses_a_bad_value(command, pname, opt, index, files, guard, tmp_path):
    cmd = COMMANDS[command]
    param = next(p for p in cmd.params if p.name == pname)
    value = bad_values(cmd, param, files)[index]
    out = tmp_path / "out"
    args = replace_option(baseline(command, files, out), cmd, param, opt, value)
    result = runner.invoke(app, args)
    keys = {opt or "", (opt or "").lstrip("-"), (opt or "").lstrip("-").replace("-", "_"), pname}
    assert_refused(result, out, value, *keys)


# --- values that are of the right type but out of the option's domain -------------------------

DOMAIN = [
    ("train", ["--forget-random", "1.5", "--retrain"], "1.5"),
    ("train", ["--forget-random", "0", "--retrain"], "--forget-random"),
    ("train", ["--epochs", "0"], "epochs"),
    ("train", ["--lr", "0"], "lr"),
    ("train", ["--batch-size", "0"], "batch_size"),
    ("train", ["--parties", "3"], "--parties"),
    ("train", ["--seed", str(2**32)], "--seed"),
    ("run", ["--forget-random", "1.5"], "1.5"),
    ("run", ["--references", "0"], "references"),
    ("run", ["--parties", "0"], "parties"),
    ("run", ["--epochs", "0"], "epochs"),
    ("run", ["--concept", "3,8"], "--concept"),
    ("run", ["--methods", "target"], "vfl"),
    ("audit", ["--confidence", "1.5"], "confidence"),
    ("audit", ["--n-splits", "1"], "n_splits"),
    ("audit", ["--told-apart-level", "0.01"], "told_apart_level"),
    ("audit", ["--joint-level", "0"], "joint_level"),
    ("audit", ["--forget-classes", ","], "--forget-classes"),
    ("audit", ["--forget-random", "0.5", "--forget-classes", "3"], "exactly one"),
    ("bench", ["--jobs", "0"], "--jobs"),
    ("bench", ["--address", "ray://x:1"], "--address"),
    ("forgetting-quality", ["--runs", "2"], "--runs"),
    ("forgetting-quality", ["--runs-for", "finetune=x"], "--runs-for"),
    ("forgetting-quality", ["--jobs", "0"], "--jobs"),
    ("unlearn", ["--method", "retrain"], "retrain"),
    ("unlearn", ["--param", "epochs=abc"], "epochs"),
    ("unlearn", ["--param", "lr=nan"], "lr"),
    ("audit", ["--layers", "penultimate,penultimate"], "penultimate"),
    ("audit", ["--layers", ","], "--layers"),
    ("train", ["--lr", "1e300"], "--lr"),
    ("unlearn", ["--param", "epochs=0"], "epochs"),
    ("unlearn", ["--param", "lr=1e300"], "lr"),
]


@pytest.mark.parametrize("command,extra,names", DOMAIN, ids=[f"{c}:{' '.join(e)}" for c, e, _ in DOMAIN])
def test_out_of_domain_values_are_refused(command, extra, names, files, guard, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, with_options(baseline(command, files, out), extra, keep_forget="exactly one" in names))
    assert_refused(result, out, names)


def with_options(args: list[str], extra: list[str], keep_forget: bool = False) -> list[str]:
    """``args`` + ``extra``, each option of ``extra`` replacing the baseline's (a repeated option is an
    error of its own); another forget option is dropped too unless ``keep_forget``."""
    given = {t for t in extra if t.startswith("--")}
    drop = set(given)
    if given & set(FORGET) and not keep_forget:
        drop |= set(FORGET)
    return _without(args, drop) + extra


def _without(args: list[str], drop: set[str]) -> list[str]:
    """``args`` less each option of ``drop`` and the value after it."""
    out, i = [], 0
    while i < len(args):
        if args[i] in drop:
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


# --- run --config: wrongly typed YAML values -------------------------------------------------

YAML_CASES = [
    ("seed: abc", "seed"), ("seed: 1.5", "seed"), ("seed: -1", "seed"), ("data_seed: [1]", "data_seed"),
    ("forget_random: .nan", "forget_random"), ("forget_random: 1.5", "forget_random"),
    ("forget_random: abc", "forget_random"),
    ("forget_classes: {a: 1}", "forget_classes"), ("forget_classes: [a]", "forget_classes"),
    ("methods: {finetune: 1}", "methods"), ("methods: [3]", "methods"), ("methods: [nope]", "nope"),
    ("recipe: [1]", "recipe"), ("recipe: {epochs: abc}", "epochs"), ("recipe: {epochs: 0}", "epochs"),
    ("recipe: {lr: .inf}", "lr"), ("recipe: {epoch: 3}", "epoch"),
    ("method_params: {finetune: {lr: abc}}", "lr"), ("method_params: {finetune: [1]}", "finetune"),
    ("method_params: {finetune: {nope: 1}}", "nope"), ("method_params: {finetune: {epochs: 1.5}}", "epochs"),
    ("method_params: {salun: {lr: 0.1}}", "salun"), ("method_params: [1]", "method_params"),
    ("audit_config: {n_splits: abc}", "n_splits"), ("audit_config: {confidence: .nan}", "confidence"),
    ("audit_config: {n_split: 3}", "n_split"), ("audit_config: 3", "audit_config"),
    ("runtime: {amp: 3}", "amp"), ("runtime: [bf16]", "runtime"), ("model_kwargs: [1]", "model_kwargs"),
    ("model_kwargs: {width: abc}", "width"), ("dataset: 3", "dataset"), ("out: [a]", "out"),
    ("download: maybe", "download"), ("audit: 2", "audit"), ("references: 0", "references"),
    ("parties: 0", "parties"), ("preset: 5", "preset"), ("task: nope", "task"), ("concept: [3]", "concept"),
    ("device: [cpu]", "device"), ("setting: 1", "setting"), ("test_convention: x", "test_convention"),
    ("model: [a]", "model"), ("idi: []", "idi"),
]


@pytest.mark.parametrize("line,names", YAML_CASES, ids=[c for c, _ in YAML_CASES])
def test_run_config_values_are_typed(line, names, guard, tmp_path, cache_dir):
    out = tmp_path / "out"
    base = {"dataset": "digits", "forget_classes": [3], "methods": ["finetune"], "out": str(out)}
    key = line.split(":")[0]
    text = yaml.safe_dump({k: v for k, v in base.items() if k != key}) + line + "\n"
    cfg = tmp_path / "run.yaml"
    cfg.write_text(text)
    result = runner.invoke(app, ["run", "--config", str(cfg), "--no-progress"])
    assert_refused(result, out, names)


# --- bench suites: wrongly typed values --------------------------------------------------------

SUITE_CASES = [
    ({"seeds": ["a"]}, "a"), ({"seeds": 1.5}, "1.5"), ({"tasks": [{"forget_random": 1.5}]}, "forget_random"),
    ({"tasks": [{"forget_classes": "x"}]}, "forget_classes"), ({"tasks": {"forget_classes": [3]}}, "task"),
    ({"methods": [{"name": "finetune", "variants": [{"lr": "abc"}]}]}, "lr"),
    ({"methods": [{"name": "finetune", "variants": {"lr": 0.1}}]}, "variants"),
    ({"methods": [{"name": "finetune", "variants": [{"epochs": 1.5}]}]}, "epochs"),
    ({"methods": [3]}, "3"), ({"datasets": [3]}, "3"), ({"models": [{"a": 1}]}, "model"),
    ({"recipe": {"epochs": "abc"}}, "epochs"), ({"audit_config": {"n_splits": float("nan")}}, "n_splits"),
    ({"seeds": [-1]}, "seed"),
]


@pytest.mark.parametrize("change,names", SUITE_CASES, ids=[json.dumps(c) for c, _ in SUITE_CASES])
def test_bench_suite_values_are_typed(change, names, guard, tmp_path):
    out = tmp_path / "out"
    grid = {"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["finetune"], "seeds": [0],
            **change}
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"suite": "t", "grids": [grid]}))
    result = runner.invoke(app, ["bench", str(suite), "--db", str(out / "s.db"), "--out", str(out)])
    assert_refused(result, out, names)


@pytest.mark.parametrize("top", [{"grids": {"a": 1}}, {"defaults": [1]}, {"suite": ["x"]}, [1, 2]],
                         ids=["grids-mapping", "defaults-list", "suite-list", "not-a-mapping"])
def test_bench_suite_shape_is_checked(top, guard, tmp_path):
    out = tmp_path / "out"
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump(top))
    result = runner.invoke(app, ["bench", str(suite), "--db", str(out / "s.db"), "--out", str(out)])
    assert_refused(result, out, "suite", "grids", "defaults", "mapping", "list")


# --- locations ---------------------------------------------------------------------------------


def test_a_read_only_output_folder_is_refused_before_training(guard, tmp_path, files):
    """Through the CLI where the file modes hold (not root); as root they hold only without the override
    capability, so there the same check runs in a process that has dropped it (setpriv)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.geteuid() != 0:
            result = runner.invoke(app, baseline("run", files, ro / "out"))
            assert_refused(result, ro / "out", "not writable")
            return
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: the folder's mode does not bind root")
        limited = [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner"]
        if subprocess.run([*limited, "mkdir", str(ro / "probe")], capture_output=True).returncode == 0:
            (ro / "probe").rmdir()
            pytest.skip("setpriv could not drop the override here")
        code = ("from unlearnkit import validate\n"
                f"validate.output_dir('--out', {str(ro / 'out')!r})")
        r = subprocess.run([*limited, sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert "UserError: --out" in r.stderr and "is not writable" in r.stderr, r.stderr
        assert not (ro / "out").exists() and os.listdir(ro) == []
    finally:
        ro.chmod(stat.S_IRWXU)


@pytest.mark.parametrize("command", ["run", "audit", "report", "forgetting-quality", "bench"])
def test_an_output_folder_that_is_a_file_is_refused(command, guard, files, tmp_path):
    out = tmp_path / "out"
    out.write_text("not a folder")
    result = runner.invoke(app, baseline(command, files, out))
    assert result.exit_code == 2 and result.stderr.startswith("error: "), result.output
    assert len(result.stderr.splitlines()) == 1 and "is a file" in result.stderr
    assert out.read_text() == "not a folder" and os.listdir(tmp_path) == ["out"]


def test_no_temporary_file_is_left_behind(guard, files, tmp_path):
    """The writability probe is an anonymous file: the folder holds nothing afterwards."""
    out = tmp_path / "exists"
    out.mkdir()
    result = runner.invoke(app, baseline("run", files, out))
    assert isinstance(result.exception, WorkStarted)
    assert os.listdir(out) == []


def test_user_text_is_printed_literally(files, tmp_path):
    """A title and a path with rich markup and mathtext reach the report and the console unchanged."""
    out = tmp_path / "[bold]out$x$"
    result = runner.invoke(app, ["report", "--results", files["results"], "--out", str(out), "--title",
                                 "[red]my $report$"])
    assert result.exit_code == 0, result.output
    assert str(out) in result.output.replace("\n", "")
    html = (out / "report.html").read_text()
    assert "[red]my $report$" in html


def test_duplicated_classes_are_recorded_once():
    from unlearnkit.config import RunConfig, load_config

    assert RunConfig(forget_classes="3,3,8,3").forget_classes == [3, 8]
    assert load_config(None, {"forget_classes": [3, 3]}).forget_classes == [3]


def test_names_with_mathtext_are_plotted_literally(tmp_path):
    """A task named with an unbalanced ``$`` (invalid mathtext) still gets its figures."""
    from sample_results import sample_results

    res = sample_results()
    res["task"]["dataset"] = "my $x^$ data"
    path = tmp_path / "results.json"
    path.write_text(json.dumps(res))
    result = runner.invoke(app, ["report", "--results", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "4 figures" in result.output, result.output


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_written_files_follow_the_umask(umask, tmp_path):
    """Atomic writes keep the mode a plain open() would give: a team's shared folder stays readable."""
    from unlearnkit.checkpoints import atomic_write_text

    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "f.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.txt").stat().st_mode) == 0o666 & ~umask


def file_options():
    """(command, option) pairs whose baseline value is a file: a folder there must be refused."""
    shapes = {"ckpt": "/x/model.pt", "suite": "/x/suite.yaml", "results": "/x/results.json", "plain": Path("/x/p"),
              "requests": "/x/requests.yaml"}
    cases = []
    for command in sorted(COMMANDS):
        args = baseline(command, shapes, Path("/x/out"))
        for i, a in enumerate(args[:-1]):
            if a.startswith("--") and Path(args[i + 1]).suffix in (".pt", ".db", ".json", ".yaml"):
                cases.append(pytest.param(command, a, id=f"{command}:{a}"))
    return sorted(set(cases), key=lambda p: p.id)


@pytest.mark.parametrize("command,opt", file_options())
def test_a_folder_where_a_file_belongs_is_refused(command, opt, files, guard, tmp_path):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    out = tmp_path / "out"
    args = baseline(command, files, out)
    args = [folder.as_posix() if i > 0 and args[i - 1] == opt else a for i, a in enumerate(args)]
    result = runner.invoke(app, args)
    assert_refused(result, out, opt, str(folder))


# --- files that load safely but are wrong inside (issue 30) -------------------------------------

#: (command, option) pairs that read a checkpoint
CHECKPOINT_OPTIONS = [("unlearn", "--checkpoint"), ("audit", "--original"), ("audit", "--unlearned"),
                      ("audit", "--retrained")]


@pytest.fixture(scope="module")
def bad_checkpoints(tmp_path_factory, digits_original):
    """name -> (path of a checkpoint of the wrong structure, words of its error), and ``nan``: a valid
    checkpoint whose weights hold a NaN."""
    import copy

    import torch
    from bad_files import checkpoint_variants

    from unlearnkit.checkpoints import save_checkpoint

    d = tmp_path_factory.mktemp("bad-checkpoints")
    save_checkpoint(digits_original, d / "good.pt")
    good = torch.load(d / "good.pt", weights_only=True)
    out = {}
    for name, (payload, why) in checkpoint_variants(good, digits_original.state_dict()).items():
        torch.save(payload, d / f"{name}.pt")
        out[name] = (d / f"{name}.pt", why)
    broken = copy.deepcopy(digits_original)
    with torch.no_grad():
        broken.fc.weight[0, 0] = float("nan")
    save_checkpoint(broken, d / "nan.pt")
    out["nan"] = (d / "nan.pt", "non-finite weights")
    return out


def _with(args: list[str], opt: str, value: str) -> list[str]:
    """``args`` with ``opt``'s value replaced by ``value``."""
    i = args.index(opt)
    return args[:i + 1] + [value] + args[i + 2:]


def _checkpoint_cases():
    from bad_files import checkpoint_names

    names = checkpoint_names()
    # a NaN-weight *unlearned* model is audited (verdict collapsed: test_audit_command), not refused
    return [pytest.param(c, o, n, id=f"{c}:{o}={n}") for c, o in CHECKPOINT_OPTIONS
            for n in names + ([] if o == "--unlearned" else ["nan"])]


@pytest.mark.parametrize("command,opt,name", _checkpoint_cases())
def test_checkpoints_are_checked_by_structure(command, opt, name, bad_checkpoints, files, guard, tmp_path):
    """No KeyError / AttributeError / TypeError: one line naming the option's file and what is wrong (a
    NaN-weight model also names its option), before any feature is extracted or method run."""
    path, why = bad_checkpoints[name]
    out = tmp_path / "out"
    result = runner.invoke(app, _with(baseline(command, files, out), opt, str(path)))
    line = assert_refused(result, out, str(path))
    assert why in line, line
    if name == "nan":
        assert opt in line, line


DEVICE_COMMANDS = sorted(c for c, cmd in COMMANDS.items() if any(p.name == "device" for p in cmd.params))


def _absent_devices() -> list[str]:
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    out = ["meta", f"cuda:{count}"]
    return out + ([] if torch.backends.mps.is_available() else ["mps"])


@pytest.mark.parametrize("command", DEVICE_COMMANDS)
@pytest.mark.parametrize("device", _absent_devices())
def test_devices_this_build_cannot_use_are_refused_before_any_write(command, device, files, guard, tmp_path):
    """``--device meta`` / ``mps`` / a GPU this machine lacks: one line, and no store (tune, bench), no
    checkpoint, no folder written first."""
    out = tmp_path / "out"
    result = runner.invoke(app, with_options(baseline(command, files, out), ["--device", device]))
    assert_refused(result, out, "--device")


INDEX_COMMANDS = ["train", "run", "audit", "unlearn"]


def _index_cases():
    from bad_files import index_arrays

    return [pytest.param(c, n, id=f"{c}:{n}") for c in INDEX_COMMANDS for n in sorted(index_arrays(1))]


@pytest.mark.parametrize("command,name", _index_cases())
def test_forget_indices_files_hold_whole_numbers_or_a_mask(command, name, files, guard, tmp_path, digits):
    from bad_files import index_arrays, write_index_file

    content, why = index_arrays(len(digits.train))[name]
    path = write_index_file(tmp_path / "idx.npy", content)
    out = tmp_path / "out"
    cmd = COMMANDS[command]
    param = next(p for p in cmd.params if p.name == "forget_indices")
    args = replace_option(baseline(command, files, out), cmd, param, "--forget-indices", str(path))
    line = assert_refused(runner.invoke(app, args), out, str(path))
    assert why in line, line


def _cifar_names():
    from bad_files import cifar_batches

    return sorted(cifar_batches())


@pytest.mark.parametrize("name", _cifar_names())
def test_corrupt_cifar_batches_are_one_line(name, guard, tmp_path):
    """A truncated, empty, foreign or misshapen batch under --data-dir: one line naming it (an empty file
    printed click's ``Aborted.``), and nothing of it unpickled beyond plain arrays."""
    from bad_files import cifar_batches, fake_cifar

    content, why = cifar_batches()[name]
    batch = fake_cifar(tmp_path / "data", content)
    out = tmp_path / "out"
    result = runner.invoke(app, ["train", "--dataset", "cifar10", "--data-dir", str(tmp_path / "data"),
                                 "--out", str(out / "m.pt")])
    line = assert_refused(result, out, str(batch))
    assert why in line and "pwned" not in result.output, line



def test_an_unlearning_that_changes_nothing_writes_nothing(files, tmp_path):
    """Hyperparameters that leave every weight as it was (a step too small to move a float32 weight, BN
    statistics frozen) end in one line saying so, not in a bit-identical copy reported as completed."""
    out = tmp_path / "out"
    args = baseline("unlearn", files, out) + ["--preset", "small", "--param", "epochs=1", "--param", "lr=1e-45",
                                              "--param", "bn_mode=frozen", "--no-progress"]
    result = runner.invoke(app, args)
    line = assert_refused(result, out, "bit-identical")
    assert "finetune" in line and "nothing was written" in line
