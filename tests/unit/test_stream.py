"""Request streams (unlearnkit.stream): parsing and validating a stream before any work, resolving it
against the data (deterministic draws, the union's split hash), and the CLI's one error line."""
from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from unlearnkit import ForgetSpec, UserError, make_split
from unlearnkit.cli import app
from unlearnkit.stream import Request, _earlier_sets, parse_requests, resolve, step_split


@pytest.mark.parametrize("data, message", [
    ({"classes": [3]}, "must be a list of requests"),
    ([], "is empty"),
    (["classes 3"], "request 1 must be a mapping"),
    ([{"classes": [3]}, {"clases": [7]}], "request 2: unknown key 'clases'; did you mean 'classes'?"),
    ([{"classes": [3], "random": 0.1}], "gives classes, random: give exactly one"),
    ([{"classes": []}], "classes is empty"),
    ([{"indices": []}], "indices is empty"),
    ([{"random": 1.5}], "request 1: random must be a fraction in (0, 1) or a whole count"),
    ([{"random": 0.0}], "request 1: random must be a fraction"),
    ([{"classes": [-1]}], "request 1: classes must be a whole number >= 0"),
    ([{"concept": [3, 5]}], "concept requests are not supported in a stream"),
])
def test_bad_request_lists_name_the_argument_and_the_request(data, message):
    with pytest.raises(UserError) as e:
        parse_requests(data, "requests")
    assert message in str(e.value) and str(e.value).startswith("requests")


def test_requests_parse_each_kind_and_read_an_indices_file_beside_the_yaml(tmp_path):
    (tmp_path / "ids.txt").write_text("5 1 5\n")
    got = parse_requests([{"classes": 3}, {"random": 0.05}, {"indices": [9, 2, 9]}, {"indices": "ids.txt"}],
                         base=tmp_path)
    assert [r.kind for r in got] == ["classes", "random", "indices", "indices"]
    assert got[0].classes == (3,) and got[1].random == 0.05 and got[2].indices == (2, 9)
    assert got[3].indices == (1, 5) and got[3].source == str(tmp_path / "ids.txt")
    assert got[1].describe() == "random 5 % of what remains"


def _ids(bundle, cls):
    return np.flatnonzero(bundle.train.y.numpy() == cls)


@pytest.mark.parametrize("make, message", [
    (lambda b: [Request("classes", classes=(3,)), Request("classes", classes=(3,))],
     "request 2 (class 3): class 3 no longer exists: request 1 deleted it"),
    (lambda b: [Request("indices", indices=tuple(_ids(b, 4).tolist())), Request("classes", classes=(4,))],
     "class 4 no longer exists: earlier requests deleted all its training samples"),
    (lambda b: [Request("random", random=0.5), Request("indices", indices=tuple(range(len(b.train))))],
     "was already deleted by request 1"),
    (lambda b: [Request("indices", indices=(len(b.train),))], "is out of range"),
    (lambda b: [Request("classes", classes=(12,))], "class 12 is out of range"),
    (lambda b: [Request("random", random=0.5), Request("random", random=10_000)],
     "asks for 10000 of the"),
    (lambda b: [Request("classes", classes=tuple(range(9))), Request("classes", classes=(9,))],
     "would delete every class"),
    (lambda b: [Request("random", random=0.0001)], "selects no training sample"),
])
def test_a_bad_stream_fails_on_the_request_that_breaks_it(digits, make, message):
    with pytest.raises(UserError) as e:
        resolve(make(digits), digits, 0)
    assert message in str(e.value), str(e.value)


def test_random_requests_draw_from_what_remains_deterministically(digits):
    reqs = [Request("classes", classes=(3,)), Request("random", random=0.1)]
    a, b, c = resolve(reqs, digits, 0), resolve(reqs, digits, 0), resolve(reqs, digits, 1)
    assert np.array_equal(a[1].forget, b[1].forget) and not np.array_equal(a[1].forget, c[1].forget)
    remaining = len(digits.train) - a[0].forget.size
    assert a[1].forget.size == round(0.1 * remaining)
    assert not set(a[1].forget) & set(_ids(digits, 3))
    assert np.array_equal(a[1].deleted, np.union1d(a[0].forget, a[1].forget))


def test_a_step_split_is_keyed_by_the_union_and_drops_earlier_classes_from_test(digits, tmp_path):
    steps = resolve([Request("classes", classes=(3,)), Request("random", random=0.05),
                     Request("classes", classes=(7,))], digits, 0)
    split = step_split(digits, steps[2])
    (tmp_path / "union.txt").write_text(" ".join(map(str, steps[2].deleted)))
    plain = make_split(digits, ForgetSpec(indices_file=str(tmp_path / "union.txt")))
    assert split.split_hash == plain.split_hash  # the retrain of `run --forget-indices union` is the same model
    assert len(split.train_retain) == len(plain.train_retain)
    assert set(split.train_forget.y.tolist()) == {7} and split.forgotten_classes == (7,)
    assert 3 not in split.test.y.tolist() and set(split.test_forget.y.tolist()) == {7}
    assert 7 not in split.test_retain.y.tolist() and len(split.test_forget) + len(split.test_retain) == len(split.test)
    sample = step_split(digits, steps[1])
    assert sample.spec.kind == "samples" and len(sample.test_forget) == 0


def test_earlier_sample_sets_are_rechecked_without_the_classes_deleted_since(digits):
    """A 5 % draw holds some class-7 rows; once class 7 is deleted, those rows are class 7's to check, not
    the draw's: counted, a model that still knows class 7 would read as the draw resurfacing."""
    steps = resolve([Request("classes", classes=(3,)), Request("random", random=0.2),
                     Request("classes", classes=(7,)), Request("random", random=0.05)], digits, 0)
    y = digits.train.y.numpy()
    draw = steps[1].forget
    assert (y[draw] == 7).any()  # the case the rule is for
    at_step3 = dict((s.number, d) for s, d in _earlier_sets(steps[:2], steps[2], digits.train))
    assert len(at_step3[1]) == steps[0].forget.size  # a class set is re-checked whole
    assert sorted(at_step3[2].y.tolist()) == sorted(y[draw][y[draw] != 7].tolist())
    at_step2 = dict((s.number, d) for s, d in _earlier_sets(steps[:1], steps[1], digits.train))
    assert len(at_step2[1]) == steps[0].forget.size
    only7 = resolve([Request("indices", indices=tuple(int(i) for i in np.flatnonzero(y == 7)[:3])),
                     Request("classes", classes=(7,))], digits, 0)
    assert _earlier_sets(only7[:1], only7[1], digits.train) == []  # nothing left to re-check


def _invoke(args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("text, message", [
    ("- classes: [3]\n  classes: [4]\n", "appears twice"),
    ("- classes: [3]\n- classes: [3]\n", "class 3 no longer exists"),
    ("- classes: [3]\n- random: 2000\n", "asks for 2000 of the"),
    ("- indices: [0, 1]\n- indices: [1]\n", "index 1 was already deleted by request 1"),
    ("- {}\n", "gives no key"),
])
def test_the_cli_refuses_a_bad_stream_in_one_line_before_any_work(tmp_path, text, message):
    req = tmp_path / "r.yaml"
    req.write_text(text)
    out, cache = tmp_path / "out", tmp_path / "cache"
    r = _invoke(["stream", "--requests", req, "--dataset", "digits", "--methods", "finetune", "--out", out,
                 "--cache-dir", cache, "--no-progress"])
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert lines[-1].startswith("error: ") and message in lines[-1], r.output
    assert sum(line.startswith("error:") for line in lines) == 1
    assert not out.exists() and not any(cache.glob("*.pt"))


@pytest.mark.parametrize("extra, message", [
    (["--fallback", "always"], "--fallback must be one of none, retrain"),
    (["--fallback", "retrain", "--no-audit"], "needs the audit"),
    (["--methods", "retrain"], "needs a method besides retrain"),
])
def test_the_cli_refuses_bad_stream_options(tmp_path, extra, message):
    req = tmp_path / "r.yaml"
    req.write_text("- classes: [3]\n")
    args = ["stream", "--requests", req, "--dataset", "digits", "--out", tmp_path / "o", "--cache-dir",
            tmp_path / "c", "--no-progress"]
    r = _invoke(args + (extra if "--methods" in extra else ["--methods", "finetune", *extra]))
    assert r.exit_code == 2 and message in r.output, r.output


def test_a_config_that_says_what_to_forget_is_refused(tmp_path):
    req, cfg = tmp_path / "r.yaml", tmp_path / "c.yaml"
    req.write_text("- classes: [3]\n")
    cfg.write_text("dataset: digits\nforget_classes: [3]\nmethods: [finetune]\n")
    r = _invoke(["stream", "--requests", req, "--config", cfg, "--out", tmp_path / "o", "--no-progress"])
    assert r.exit_code == 2 and "remove forget_classes" in r.output, r.output


@pytest.mark.parametrize("kwargs, message", [
    ({"model": object()}, "model must be a model name"),
    ({"method": 3}, "method must be a method name"),
    ({"method": ["finetune", "scrub"], "lr": 0.1}, "need one method"),
    ({"requests": [{"random": 2.5}]}, "requests: request 1: random"),
    ({"fallback": "sometimes"}, "fallback must be one of"),
    ({"data": 5}, "data must be text"),
])
def test_the_python_api_names_the_bad_argument(tmp_path, kwargs, message):
    import unlearnkit as uk

    args = {"model": "small_cnn", "method": "finetune", "requests": [{"classes": [3]}], "out": tmp_path / "o",
            **kwargs}
    with pytest.raises(UserError) as e:
        uk.unlearn_sequence(args.pop("model"), args.pop("method"), args.pop("requests"), **args)
    assert message in str(e.value)
    assert not (tmp_path / "o").exists()
