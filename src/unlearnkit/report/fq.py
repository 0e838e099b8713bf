"""Forgetting quality in the leaderboard: the ``forgetting_quality.json`` files of
``unlearnkit forgetting-quality`` runs, read and checked where they enter the report.

Each file is one task and one original (its ``config.seed``) with N unlearning runs per method against
N retrained models; its score per method is the NeurIPS 2023 challenge's final score
(``final_score``: forget score x retain and test accuracy ratios, :mod:`unlearnkit.metrics.forgetting_quality_metric`).
Files of the same task with different originals are the seeds of the leaderboard's mean ± interval;
the controls (``retrain``: more retrained models, the top of the scale; ``original``: the original
itself, the bottom) go to those rows. The same task, original and method twice: the later file wins.
"""
from __future__ import annotations

import math
from pathlib import Path

from .. import validate
from ..errors import UserError
from ..results import FORGETTING_QUALITY_SCHEMA, check_forget, forget_label, model_label

FILE = "forgetting_quality.json"
Block = tuple[str, str, str]


def fq_files(paths: list[Path]) -> list[Path]:
    """Every ``forgetting_quality.json`` given: the files themselves, and those found under folders."""
    out: list[Path] = []
    for p in paths:
        p = validate.not_special("--forgetting-quality", p)
        if p.is_dir():
            found = sorted(p.rglob(FILE))
            if not found:
                raise UserError(f"--forgetting-quality: no {FILE} under {p}")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise UserError(f"--forgetting-quality: {p} does not exist")
    return out


def _read(path: Path) -> dict:
    # one found under a folder: never opened when special; UTF-8, at most MAX_TEXT_BYTES, strict JSON
    path, text = validate.text_file("--forgetting-quality", path)
    doc = validate.json_text(f"--forgetting-quality: {path}", text, "a readable JSON file")
    if not isinstance(doc, dict) or doc.get("schema") != FORGETTING_QUALITY_SCHEMA:
        raise UserError(f"--forgetting-quality: {path} is not a {FILE} (schema {FORGETTING_QUALITY_SCHEMA!r} "
                        f"expected)")
    task, methods, config = doc.get("task"), doc.get("methods"), doc.get("config")
    if not (isinstance(task, dict) and isinstance(methods, dict) and isinstance(config, dict)):
        raise UserError(f"--forgetting-quality: {path}: task, methods and config must be objects")
    if not (isinstance(task.get("dataset"), str) and isinstance(task.get("model"), str)
            and isinstance(task.get("forget"), dict)):
        raise UserError(f"--forgetting-quality: {path}: task.dataset and task.model must be text, task.forget "
                        f"an object")
    seed = config.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise UserError(f"--forgetting-quality: {path}: config.seed must be a whole number, not {seed!r}")
    for name, row in methods.items():
        # the forget score is a fraction; the final score is it times two accuracy ratios (unlearned over
        # retrained), which exceed 1 where the unlearned model is the more accurate: >= 0, no upper bound
        for key, high in (("forget_score", 1.0), ("final_score", None)):
            score = row.get(key) if isinstance(row, dict) else math.nan
            ok = score is None or (isinstance(score, (int, float)) and not isinstance(score, bool)
                                   and math.isfinite(score) and score >= 0 and (high is None or score <= high))
            if not ok:
                span = f"in [0, {high:g}]" if high is not None else ">= 0"
                raise UserError(f"--forgetting-quality: {path}: methods.{name}.{key} must be a number {span} or "
                                f"null, not {score!r}")
    num_classes = task.get("num_classes")
    if num_classes is not None:
        validate.whole(f"--forgetting-quality: {path}: task.num_classes", num_classes, low=1)
    check_forget(f"--forgetting-quality: {path}", task["forget"], num_classes)  # never dropped unnamed
    return doc


def _block(doc: dict, path: Path) -> Block:
    task = doc["task"]
    try:
        forget = forget_label(task["forget"])
    except (KeyError, TypeError, ValueError, UserError) as e:
        raise UserError(f"--forgetting-quality: {path}: task.forget is not a forget set ({e})") from None
    return task["dataset"], model_label(task), forget


def load_forgetting_quality(paths: list[Path]) -> dict[Block, dict[str, list[float]]]:
    """``{block: {method: [final score per original seed]}}`` from the files (checked; one error line each)."""
    by_seed: dict[tuple[Block, str], dict[int, float]] = {}
    for path in fq_files(paths):
        doc = _read(path)
        block = _block(doc, path)
        for name, row in doc["methods"].items():
            if row.get("final_score") is not None:
                by_seed.setdefault((block, name), {})[doc["config"]["seed"]] = float(row["final_score"])
    out: dict[Block, dict[str, list[float]]] = {}
    for (block, name), seeds in by_seed.items():
        out.setdefault(block, {})[name] = [seeds[s] for s in sorted(seeds)]
    return out
