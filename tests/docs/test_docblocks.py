"""The docs tier's extractor and runner (tests/docs/docblocks.py, runner.py): its rules, and that a broken
page fails (a drifted command, a broken snippet). Fast: no training."""
from __future__ import annotations

import pytest
from docblocks import DocsTestError, blocks
from runner import DocsBlockFailed, run_page, with_options

PAGE = """# A page

```bash
unlearnkit list methods   # a comment
unlearnkit train --dataset digits \\
    --epochs 20 --out orig.pt
```

<!-- docs-test: skip (needs the internet) -->

```bash
pip install something
```

<!-- docs-test: tiny --epochs=1 'mnist5k=>digits' -->
```console
$ unlearnkit run --dataset mnist5k --epochs 9
output line, not run
```

```text
not run either
```

<!-- docs-test: namespace digits -->
```python
print(original)
```
"""


def test_blocks_follow_the_rules():
    got = blocks(PAGE, "p.md")
    assert [(b.line, b.lang) for b in got] == [(3, "bash"), (11, "bash"), (16, "console"), (26, "python")]
    assert got[0].commands() == [["unlearnkit", "list", "methods"],
                                 ["unlearnkit", "train", "--dataset", "digits", "--epochs", "20", "--out", "orig.pt"]]
    assert got[1].skip == "needs the internet"
    assert got[2].options == ["--epochs=1"] and got[2].commands() == [
        ["unlearnkit", "run", "--dataset", "digits", "--epochs", "9"]]
    assert got[3].namespace == "digits" and got[0].skip is None


def test_tiny_options_replace_the_pages_values_on_commands_that_have_them():
    assert with_options(["run", "--epochs", "9", "--out", "x"], ["--epochs=1", "--no-progress", "--trials=2"]) == \
        ["run", "--out", "x", "--epochs=1", "--no-progress"]
    assert with_options(["bench", "s.yaml", "--jobs", "2", "--progress"], ["--jobs=1", "--no-progress"]) == \
        ["bench", "s.yaml", "--jobs=1", "--no-progress"]
    assert with_options(["--help"], ["--jobs=1"]) == ["--help"]


@pytest.mark.parametrize("page,message", [
    ("<!-- docs-test: skip -->\n```bash\nx\n```\n", "with the reason"),
    ("<!-- docs-test: tiny --a=1 -->\n\nsome prose\n```bash\nx\n```\n", "not directly above"),
    ("<!-- docs-test: frobnicate -->\n```bash\nx\n```\n", "unknown docs-test directive"),
    ("<!-- docs-test: skip (x) -->\n```text\nx\n```\n", "not run"),
    ("```bash\nx\n", "never closed"),
    ("text\n<!-- docs-test: skip (x) -->\n", "after the last block"),
])
def test_a_page_that_breaks_the_rules_is_refused(page, message):
    with pytest.raises(DocsTestError, match=message):
        blocks(page, "p.md")


def test_a_stale_replacement_fails():
    (block,) = blocks("<!-- docs-test: tiny 'mnist5k=>digits' -->\n```bash\nunlearnkit list models\n```\n", "p.md")
    with pytest.raises(DocsTestError, match="stale directive"):
        block.commands()


BROKEN = {
    "a drifted option": ("```bash\nunlearnkit list methods\nunlearnkit list methods --no-such-option\n```\n",
                         "p.md:1: `unlearnkit list methods --no-such-option` exited 2"),
    "a broken snippet": ("```python\nimport unlearnkit as uk\nuk.no_such_function()\n```\n",
                         "p.md:1: the Python block raised AttributeError"),
    "another command": ("```bash\nmake demo\n```\n", "is not an unlearnkit command"),
    "an unknown namespace": ("<!-- docs-test: namespace nope -->\n```python\nx\n```\n", "no namespace 'nope'"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_page_fails(case, tmp_path):
    page, message = BROKEN[case]
    with pytest.raises(DocsBlockFailed, match=message):
        run_page(page, "p.md", tmp_path, {})


def test_a_working_page_runs(tmp_path):
    page = ("```bash\nunlearnkit list methods\npython -m unlearnkit --help\n```\n\n"
            "```python\nx = 1 + 1\nassert x == 2\n```\n")
    assert run_page(page, "p.md", tmp_path, {}) == ["p.md:1", "p.md:6"]
    assert (tmp_path / "tiny.yaml").exists() and (tmp_path / "benchmarks").is_symlink()


def test_a_here_document_writes_its_file_before_the_next_command(tmp_path):
    page = ("```bash\ncat > sub/requests.yaml <<'YAML'\n- classes: [3]   # kept as written\n- random: 0.05\nYAML\n"
            "unlearnkit list methods\n```\n")
    (block,) = blocks(page, "p.md")
    text = "- classes: [3]   # kept as written\n- random: 0.05\n"
    assert block.commands() == [["cat", ">", "sub/requests.yaml", text], ["unlearnkit", "list", "methods"]]
    assert run_page(page, "p.md", tmp_path, {}) == ["p.md:1"]
    assert (tmp_path / "sub" / "requests.yaml").read_text() == "- classes: [3]   # kept as written\n- random: 0.05\n"


@pytest.mark.parametrize("page,message", [
    ("```bash\ncat > x.yaml <<'END'\nno end\n```\n", "never closed"),
    ("```bash\ncat > ../x.yaml <<'END'\nx\nEND\n```\n", "inside the page's folder"),
    ("```bash\ncat > /tmp/x.yaml <<'END'\nx\nEND\n```\n", "inside the page's folder"),
])
def test_a_here_document_stays_in_its_folder_and_ends(page, message):
    (block,) = blocks(page, "p.md")
    with pytest.raises(DocsTestError, match=message):
        block.commands()


CHECKED = {
    "a drifted option": ("<!-- docs-test: check (an hour) -->\n```bash\nunlearnkit bench s.yaml --jobz 2\n```\n",
                         "does not parse: No such option: --jobz"),
    "a drifted value": ("<!-- docs-test: check (an hour) -->\n```bash\nunlearnkit run --epochs many\n```\n",
                        "Invalid value for '--epochs'"),
    "an unknown command": ("<!-- docs-test: check (x) -->\n```bash\ntorchrun -m unlearnkit trian --out a.pt\n```\n",
                           "No such command 'trian'"),
    "a make target gone": ("<!-- docs-test: check (x) -->\n```bash\nmake demo\nmake smoke-all\n```\n",
                           "no such target"),
    "an extra gone": ("<!-- docs-test: check (x) -->\n```bash\npip install -e \".[dev,gpu]\"\n```\n", "no extra"),
    "a test file gone": ("<!-- docs-test: check (x) -->\n```bash\nOMP_NUM_THREADS=1 pytest tests/nope.py -k x\n```\n",
                         "do not exist"),
    "another tool": ("<!-- docs-test: check (x) -->\n```bash\nrm -rf runs\n```\n", "cannot be checked"),
}


@pytest.mark.parametrize("case", list(CHECKED))
def test_a_checked_block_that_drifted_fails(case, tmp_path):
    page, message = CHECKED[case]
    with pytest.raises(DocsBlockFailed, match=message):
        run_page(page, "p.md", tmp_path, {})


def test_a_checked_block_is_parsed_not_run(tmp_path):
    page = ("<!-- docs-test: check (two hours) -->\n```bash\nunlearnkit bench benchmarks/configs/cpu.yaml --jobs 2\n"
            "torchrun --nproc_per_node 8 -m unlearnkit train --dataset cifar10 --model resnet18 --out o.pt\n"
            "make test PYTEST_ARGS=-x\npip install -e \".[dev]\"\npython benchmarks/audit_cost.py --x 1\n```\n\n"
            "<!-- docs-test: check (a fragment) -->\n```python\nclass M:\n    lr: float = 0.01\n    ...\n```\n")
    assert run_page(page, "p.md", tmp_path, {}) == ["p.md:2 checked: two hours", "p.md:11 checked: a fragment"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["benchmarks", "examples", "my_run.yaml", "tiny.yaml"]
