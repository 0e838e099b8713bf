"""The sweep over the command line: every option of every command (read from the CLI, so a new one is swept the
day it is added) against the families of harness.py that fit its type, and every file a command reads against
the families of file contents. One baseline per command is valid (checked: it reaches the work); each case
replaces one value. Contract: harness.assert_cli_refused (exit 2, one printable error: line naming the option,
the file or the value, nothing written, no work started), or harness.assert_cli_accepted where ACCEPTED says why.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from harness import (
    HOSTILE,
    HUGE_INT,
    HUGE_TEXT,
    SECRET,
    Files,
    WorkStarted,
    assert_cli_accepted,
    assert_cli_refused,
    commands,
    option_kind,
)
from typer.testing import CliRunner

from unlearnkit.cli import app

runner = CliRunner()
COMMANDS = commands()
FORGET = ("--forget-classes", "--forget-random", "--forget-indices", "--forget-flipped")


def baseline(command: str, f: Files, out: Path) -> list[str]:
    """A valid call of ``command`` whose outputs all go under ``out`` (which does not exist yet)."""
    ck, g = str(f.good["ckpt"]), f.good
    return {
        "list": ["list", "methods"],
        "train": ["train", "--dataset", "digits", "--out", str(out / "m.pt")],
        "run": ["run", "--dataset", "digits", "--forget-classes", "3", "--methods", "finetune", "--out", str(out)],
        "audit": ["audit", "--original", ck, "--unlearned", ck, "--retrained", ck, "--dataset", "digits",
                  "--forget-classes", "3", "--out", str(out)],
        "bench": ["bench", str(g["suite"]), "--db", str(out / "store.db"), "--out", str(out)],
        "report": ["report", "--results", str(g["results"]), "--out", str(out)],
        "forgetting-quality": ["forgetting-quality", "--dataset", "digits", "--forget-classes", "3", "--methods",
                               "finetune", "--runs", "3", "--out", str(out)],
        "unlearn": ["unlearn", "--checkpoint", ck, "--dataset", "digits", "--forget-classes", "3", "--method",
                    "finetune", "--out", str(out / "u.pt")],
        "tune": ["tune", "--dataset", "digits", "--forget-classes", "3", "--method", "ssd", "--trials", "1",
                 "--db", str(out / "store.db"), "--out", str(out / "t.yaml")],
        "stream": ["stream", "--requests", str(g["requests"]), "--dataset", "digits", "--methods", "finetune",
                   "--references", "1", "--out", str(out)],
    }[command]


#: (command, option) -> the kind of file the option reads
INPUTS = {("audit", "--original"): "ckpt", ("audit", "--unlearned"): "ckpt", ("audit", "--retrained"): "ckpt",
          ("audit", "--forget-data"): "tensors", ("audit", "--retain-data"): "tensors",
          ("audit", "--test-data"): "tensors", ("unlearn", "--checkpoint"): "ckpt", ("bench", None): "suite",
          ("report", "--results"): "results", ("report", "--forgetting-quality"): "fq", ("report", "--db"): "db",
          ("run", "--config"): "config", ("stream", "--config"): "config", ("stream", "--requests"): "requests",
          **{(c, "--forget-indices"): "indices" for c in ("train", "run", "audit", "unlearn")}}
#: options that take any value of their type by design, with the reason
FREE = {("report", "--title"): "free text, printed literally (tests/integration/test_bad_input.py)",
        ("*", "--data-dir"): "the bundled datasets never read it; torchvision datasets report a missing folder"}
#: (command, option, raw value) accepted by design, with the reason
ACCEPTED = {
    ("tune", "--db", "@empty"): "an empty file is a new store (docs/usage.md: absent, empty or SQLite)",
}


def option_values(kind, role: str | None) -> list[tuple[str, str]]:
    """``[(family, value)]`` for an option of type ``kind``; ``@name`` values are files of harness.Files."""
    if kind is int:
        return [("wrong type", "abc"), ("empty", ""), ("huge", HUGE_INT)]
    if kind is float:
        return [("wrong type", "abc"), ("empty", ""), ("huge", "1e400"), ("NaN/inf", "nan"), ("NaN/inf", "-inf")]
    if kind is str:
        return [("empty", ""), ("huge", HUGE_TEXT)] + [("hostile name", h) for h in HOSTILE]
    if kind is Path and role == "input":
        return [("wrong type", "@folder"), ("empty", ""), ("empty", "@empty"), ("huge", "@huge"),
                ("special file", "@fifo"), ("special file", "/dev/zero"), ("non-UTF-8", "@non-utf8"),
                ("hostile name", "@secret"), ("hostile name", "@missing:a\nb\x1b[31m")]
    if kind is Path and role == "output":
        return [("empty", ""), ("special file", "@socket"), ("special file", "@fifo"), ("wrong type", "@below-a-file")]
    return []


def _role(command: str, opt: str | None, name: str) -> str | None:
    if (command, opt) in INPUTS:
        return "input"
    if opt in ("--out", "--db", "--leaderboard", "--cache-dir"):
        return "output"
    return None


def cases():
    out = []
    for command, cmd in sorted(COMMANDS.items()):
        for param in cmd.params:
            opt = param.opts[0] if param.param_type_name == "option" else None
            if param.name == "help" or (command, opt) in FREE or ("*", opt) in FREE:
                continue
            kind = option_kind(cmd, param)
            for i, (family, value) in enumerate(option_values(kind, _role(command, opt, param.name))):
                shown = value if len(value) < 30 else value[:8] + f"...({len(value)})"
                out.append(pytest.param(command, param.name, opt, i, family,
                                        id=f"{family}|{command}:{opt or param.name}={shown!r}"))
    return out


def resolve(value: str, f: Files, tmp_path: Path) -> str:
    if not value.startswith("@"):
        return value
    name = value[1:]
    if name.startswith("missing:"):
        return str(tmp_path / name.split(":", 1)[1])
    if name == "below-a-file":
        return str(f.good["indices"] / "x")
    return str(f.bad[name])


def with_value(args: list[str], cmd, param, opt: str | None, value: str) -> list[str]:
    """``args`` with ``opt`` set to ``value`` (its baseline value, and any other forget option, dropped)."""
    if opt is None:  # the positional argument (bench's suite, list's what)
        return [args[0], value, *args[2:]]
    drop = {opt} | (set(FORGET) - {opt} if opt in FORGET else set())
    kept, skip = [], False
    for tok in args:
        if skip:
            skip = False
            continue
        if tok in drop:
            skip = True
            continue
        kept.append(tok)
    return kept + [f"{opt}={value}"]


def names_of(command: str, opt: str | None, pname: str, value: str) -> tuple[str, ...]:
    """What the error line may name: the option (with or without dashes, singular), the parameter, the value;
    for a positional argument, the command (``unknown list 'x'``)."""
    bare = (opt or pname).lstrip("-")
    return (opt or command, bare, bare.replace("-", "_"), bare.rstrip("s"), bare.split("-")[-1], pname, value[:40])


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"list"}))
def test_the_baselines_reach_the_work(command, sweep_files, guard, tmp_path):
    result = runner.invoke(app, baseline(command, sweep_files, tmp_path / "out") + _no_progress(command))
    assert isinstance(result.exception, WorkStarted), (result.exit_code, result.output)


def _no_progress(command: str) -> list[str]:
    return ["--no-progress"] if any(p.name == "progress" for p in COMMANDS[command].params) else []


@pytest.mark.parametrize("command,pname,opt,index,family", cases())
def test_every_option_against_each_family(command, pname, opt, index, family, sweep_files, guard, tmp_path):
    cmd = COMMANDS[command]
    param = next(p for p in cmd.params if p.name == pname)
    _, raw = option_values(option_kind(cmd, param), _role(command, opt, pname))[index]
    value = resolve(raw, sweep_files, tmp_path)
    out = tmp_path / "out"
    args = with_value(baseline(command, sweep_files, out), cmd, param, opt, value) + _no_progress(command)
    result = runner.invoke(app, args)
    if (command, opt, raw) in ACCEPTED:
        assert_cli_accepted(result)
        return
    assert_cli_refused(result, out, names_of(command, opt, pname, value))


# --- the contents of the files a command reads --------------------------------------------------------------

GRID = {"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["finetune"], "seeds": [0]}
RUN = {"dataset": "digits", "forget_classes": [3], "methods": ["finetune"]}


def _yaml(data) -> str:
    return yaml.safe_dump(data)


def _results(change) -> str:
    from sample_results import sample_results

    res = sample_results()
    change(res)
    return json.dumps(res)


#: (kind of file, family, what) -> (its text, words the error names); kinds as in INPUTS
CONTENTS = {
    ("config", "wrong type", "a list"): ("- dataset: digits\n", ["config file", "mapping"]),
    ("config", "wrong type", "a scalar"): (SECRET + "\n", ["config file", "mapping"]),
    ("config", "NaN/inf", "lr .nan"): (_yaml(RUN) + "recipe: {lr: .nan}\n", ["lr"]),
    ("config", "NaN/inf", "forget_random .inf"): (_yaml({k: v for k, v in RUN.items() if k != "forget_classes"})
                                                  + "forget_random: .inf\n", ["forget_random"]),
    ("config", "duplicate", "key twice"): (_yaml(RUN) + "seed: 0\nseed: 1\n", ["appears twice"]),
    ("config", "contradictory", "two forget sets"): (_yaml({**RUN, "forget_random": 0.1}), ["exactly one", "forget"]),
    ("config", "hostile name", "dataset"): (_yaml({**RUN, "dataset": "digits\x1b[31m"}), ["dataset"]),
    ("config", "hostile name", "method"): (_yaml({**RUN, "methods": ["../../x"]}), ["method"]),
    ("config", "huge", "deep nesting"): ("a: " + "[" * 5000 + "]" * 5000 + "\n", ["config file"]),
    ("suite", "wrong type", "a list"): (_yaml([GRID]), ["suite file", "mapping"]),
    ("suite", "NaN/inf", "seed .nan"): (_yaml({"suite": "t", "grids": [{**GRID, "seeds": [float("nan")]}]}),
                                        ["seed"]),
    ("suite", "duplicate", "key twice"): (_yaml({"suite": "t", "grids": [GRID]}) + "suite: u\n", ["appears twice"]),
    ("suite", "contradictory", "two forget sets"): (
        _yaml({"suite": "t", "grids": [{**GRID, "tasks": [{"forget_classes": [3], "forget_random": 0.1}]}]}),
        ["exactly one", "forget"]),
    ("suite", "hostile name", "suite ../"): (_yaml({"suite": "../../../escape", "grids": [GRID]}), ["suite"]),
    ("suite", "hostile name", "dataset"): (_yaml({"suite": "t", "grids": [{**GRID, "datasets": ["\x1b[2J"]}]}),
                                           ["dataset"]),
    ("requests", "wrong type", "a mapping"): ("classes: [3]\n", ["--requests", "list"]),
    ("requests", "empty", "an empty list"): ("[]\n", ["--requests", "empty"]),
    ("requests", "empty", "an empty request"): ("- classes: []\n", ["empty"]),
    ("requests", "NaN/inf", "random .nan"): ("- random: .nan\n", ["random"]),
    ("requests", "duplicate", "a class twice"): ("- classes: [3]\n- classes: [3]\n", ["class 3"]),
    ("requests", "duplicate", "an index twice"): ("- indices: [5]\n- indices: [5]\n", ["index 5"]),
    ("requests", "contradictory", "two kinds"): ("- {classes: [3], random: 0.1}\n", ["exactly one"]),
    ("requests", "hostile name", "indices ../ file"): ("- indices: ../../../../../../etc/passwd\n",
                                                       ["indices", "passwd"]),
    ("requests", "hostile name", "an escape in a key"): ("- \x1b[31mclasses: [3]\n", ["not valid YAML"]),
    ("requests", "hostile name", "unknown key"): ("- '[red]classes': [3]\n", ["unknown key '[red]classes'"]),
    ("results", "wrong type", "a list"): ("[]", ["results.json"]),
    ("results", "empty", "{}"): ("{}", ["results.json"]),
    ("results", "NaN/inf", "Infinity literal"): (
        _results(lambda r: None).replace('"forget_acc": 1.0', '"forget_acc": Infinity'), ["must be a finite number"]),
    ("results", "duplicate", "key twice"): (_results(lambda r: None)[:-1] + ', "schema": "unlearnkit.results/1"}',
                                            ["appears twice"]),
    ("results", "contradictory", "config vs task"): (
        _results(lambda r: r["config"].update(forget_classes=[99])), ["config.forget_classes"]),
    ("results", "huge", "a huge number"): (_results(lambda r: None).replace('"seed": 0', '"seed": ' + HUGE_INT),
                                           ["seed"]),
    ("fq", "wrong type", "a list"): ("[]", ["forgetting_quality"]),
    ("fq", "NaN/inf", "NaN literal"): ('{"schema": NaN}', ["is not a forgetting_quality.json"]),
    ("fq", "duplicate", "key twice"): ('{"schema": 1, "schema": 2}', ["appears twice"]),
    ("indices", "NaN/inf", "nan in text"): ("1 2 nan\n", ["item 3 of line 1"]),
    ("indices", "wrong type", "words"): ("one two\n", ["item 1 of line 1"]),
    ("indices", "huge", "beyond int64"): (HUGE_INT + "\n", ["far beyond"]),
    ("indices", "hostile name", "a password file"): (SECRET + "\n", ["item 1 of line 1"]),
}
#: the results.json case that names a hostile model: accepted, drawn literally (test_bad_input's literal tests)
WRITE_AS = {"config": "run.yaml", "suite": "suite.yaml", "requests": "requests.yaml", "results": "results.json",
            "fq": "forgetting_quality.json", "indices": "idx.txt"}
#: the option of each kind in one command's baseline
WHERE = {"config": ("run", "--config"), "suite": ("bench", None), "requests": ("stream", "--requests"),
         "results": ("report", "--results"), "fq": ("report", "--forgetting-quality"),
         "indices": ("train", "--forget-indices")}


@pytest.mark.parametrize("key", list(CONTENTS), ids=[f"{f}|{k}:{w}" for k, f, w in CONTENTS])
def test_every_file_kind_against_each_family(key, sweep_files, guard, tmp_path):
    kind, family, _ = key
    text, words = CONTENTS[key]
    path = tmp_path / WRITE_AS[kind]
    path.write_text(text)
    command, opt = WHERE[kind]
    out = tmp_path / "out"
    cmd = COMMANDS[command]
    param = next(p for p in cmd.params if (opt in p.opts if opt else p.param_type_name == "argument"))
    args = with_value(baseline(command, sweep_files, out), cmd, param, opt, str(path)) + _no_progress(command)
    if kind == "config":  # the file alone says what to run (a flag would win over its key)
        args = ["run", "--config", str(path), "--out", str(out), "--no-progress"]
    if command == "train":
        args.append("--retrain")
    assert_cli_refused(runner.invoke(app, args), out, tuple(words))


def test_every_family_is_swept():
    """The harness covers each family of harness.FAMILIES from the command line."""
    from harness import FAMILIES

    seen = {p.values[4] for p in cases()} | {f for _, f, _ in CONTENTS}
    assert set(FAMILIES) <= seen, set(FAMILIES) - seen
