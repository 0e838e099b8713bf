"""``unlearnkit forgetting-quality``: the NeurIPS 2023 machine-unlearning challenge's forgetting quality.

Reference: google-deepmind/unlearning_evaluation, ``main.py`` (train N unlearned and N retrained
models, the logit-scaled confidence of every forget example under each, ``metric.py``'s forget
score, then ``final = forget_score * (RA_u / RA_r) * (TA_u / TA_r)`` with mean accuracies) and
``metric.py`` (re-implemented in :mod:`unlearnkit.metrics.forgetting_quality_metric`).

The task is built as ``unlearnkit run`` builds it (:func:`unlearnkit.runner.build_split`,
``resolve_model``, the dataset's default recipe and the method preset). The original is the
cached ``original`` of seed ``seed``; the N retrained models are the cached ``retrain``
references of seeds ``seed+1 .. seed+N``; each method runs N times from that one original, with
seeds ``seed+1 .. seed+N``. ``runs_for`` gives a slow method fewer runs n; it is then compared
with the first n retrained models (the output says so). Two controls (on by default) calibrate
the scale: ``retrain``, N more retrained models (seeds ``seed+N+1 .. seed+2N``) against the N
references, which is what a perfect method would score, and ``original``, the original itself N
times (doing nothing: every example's unlearned distribution is a point mass, so the peaky rule
gives eps = 50 and the score 0).

Per model: the confidences of every training forget example (``split.train_forget``, in its
order), the retain accuracy (``train_retain``), the test accuracy (for class forgetting on the
test samples of the retained classes, ``test_retain``; for sample-level forgetting on the whole
test set, which is what ``test_retain`` holds then) and the forget accuracy.

The flipped-label task (``forget_flipped``, mislabeled data: :mod:`unlearnkit.data.splits`) is the
split ``unlearnkit run --forget-flipped`` makes (the same split hash for the same data seed). Its
confidences and forget accuracy read the labels the forget set was trained with, the flipped ones
(``train_forget.y``), as ``run``'s forget accuracy and MIA do: the original memorised those labels and
the retrained models never saw them, so that is where an unlearned model that still remembers them
stands apart from retraining; the accuracy on the true labels is kept as ``forget_true_acc``.

Each row also has a 95 % percentile bootstrap interval over forget examples (``forget_score_ci``,
``final_score_ci``; :func:`unlearnkit.metrics.forgetting_quality_metric.forget_score_interval`, 2000
resamples of the per-example epsilons, seed 0), computed from the epsilons when the rows are scored,
so records stored before it are scored with one too.

Differences from the reference: it trains on CIFAR-10 with ResNet-18 and fixed unlearned/retrained
checkpoints handed in; here any dataset/model/method of unlearnkit, with the project's training
recipe and seeds as above. The unlearned models are not kept (only their records).

Every (role, method, seed) is one job: :class:`Job`, run by :func:`execute_job` in this process,
in worker processes (``jobs``) or as Ray tasks (``executor="ray"``) through
:mod:`unlearnkit.bench.executors`. The retrained references go through the model cache, whose
file lock stops two workers from training one model twice. Each finished job's record is written
atomically to ``<out>/jobs/<role>-<method>-s<seed>.json``; a rerun reuses every record whose key
(dataset fingerprint, split hash, model, recipe, method hyperparameters, original, seed) matches,
so an interrupted run loses at most the jobs in flight.
"""
from __future__ import annotations

import json
import re
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from . import validate
from .bench.cell import Machine
from .checkpoints import atomic_write_bytes, atomic_write_text, write_together
from .config import RunConfig
from .errors import UserError
from .methods import METHODS
from .plotting import literal_text
from .results import FORGETTING_QUALITY_SCHEMA, describe_forget

SCHEMA = FORGETTING_QUALITY_SCHEMA
JOB_FORMAT = 1  # bump when a record's content changes, to recompute stored jobs
MIN_RUNS = 3
REFERENCE = ("google-deepmind/unlearning_evaluation metric.py and main.py "
             "(NeurIPS 2023 machine unlearning challenge)")
CONTROLS = ("retrain", "original")
N_BOOT, BOOT_SEED, LEVEL = 2000, 0, 0.95  # the bootstrap interval over forget examples of every score
FLIPPED_NOTE = ("; confidences and forget acc on the flipped labels the original trained on (forget_true_acc in "
                "the JSON: on the true ones)")


class JobsFailedError(RuntimeError):
    """Some jobs failed; the finished ones are kept and the next call retries the others."""


@dataclass(frozen=True)
class Job:
    """One model to make and measure: plain data, picklable, the same in any process."""

    role: str      # "reference" (retrained models compared with) | "method" | "control"
    method: str    # "retrain", "original" or an unlearning method's canonical name
    seed: int
    config: dict   # RunConfig.to_dict(): rebuilds data, split, model and recipe anywhere
    key: dict      # what the record depends on; a stored record with another key is recomputed

    @property
    def name(self) -> str:
        return f"{self.role}-{re.sub(r'[^A-Za-z0-9_.+-]', '_', self.method)}-s{self.seed}"


# ---------------------------------------------------------------------------------------------
# the task and one job (any process)


@dataclass
class _Task:
    cfg: RunConfig
    bundle: object
    split: object
    model_name: str
    model_kwargs: dict
    recipe: object
    preset: str


_TASKS: dict[str, _Task] = {}  # this process's last task: jobs of one call share its data


def _task(cfg: RunConfig) -> _Task:
    """Data, split, model and recipe as ``unlearnkit run`` builds them (runner's helpers)."""
    from .data.datasets import load_dataset
    from .methods import preset_for
    from .runner import build_split, resolve_model
    from .training import default_recipe, with_overrides

    bundle = load_dataset(cfg.dataset, cfg.data_dir, cfg.download, cfg.data_seed)
    split = build_split(cfg, bundle)
    cfg, model_name, model_kwargs = resolve_model(cfg, bundle)
    recipe = with_overrides(default_recipe(bundle.name, model_name), **cfg.recipe)
    preset = preset_for(bundle.name, cfg.model) if cfg.preset == "auto" else cfg.preset
    return _Task(cfg, bundle, split, model_name, model_kwargs, recipe, preset)


def _task_of(config: dict) -> _Task:
    k = json.dumps(config, sort_keys=True, default=str)
    if k not in _TASKS:
        _TASKS.clear()
        _TASKS[k] = _task(RunConfig(**config))
    return _TASKS[k]


def _reference(kind: str, task: _Task, seed: int, cache_dir, device, progress: bool = False):
    from .training import reference_model

    return reference_model(kind, task.split, task.model_name, task.recipe, seed=seed,
                           model_kwargs=task.model_kwargs, cache_dir=cache_dir, device=device,
                           progress=progress)


def measure(model, split, device) -> dict:
    """Confidences of the forget examples and the three accuracies (percent) of one model, all on the
    labels the forget set was trained with (the flipped ones on the flipped-label task, module docstring),
    and ``forget_true_acc`` on the true labels where they differ."""
    from .metrics import accuracy, logit_scaled_confidence
    from .models.features import LOGITS, extract

    logits = {part: extract(model, getattr(split, part), [LOGITS], device=device)[LOGITS]
              for part in ("train_forget", "train_retain", "test_retain")}
    confs = logit_scaled_confidence(logits["train_forget"], split.train_forget.y)
    if not np.isfinite(confs).all():
        raise ValueError("the model's logits on the forget set are not finite")
    out = {"confs": confs.tolist(), "forget_acc": accuracy(logits["train_forget"], split.train_forget.y),
           "retain_acc": accuracy(logits["train_retain"], split.train_retain.y),
           "test_acc": accuracy(logits["test_retain"], split.test_retain.y)}
    if "true_label" in split.train_forget.aux:  # flipped labels: the accuracy on the true classes too
        out["forget_true_acc"] = accuracy(logits["train_forget"], split.true_forget_labels)
    return out


def execute_job(job: Job, machine: Machine) -> dict:
    """Make and measure the job's model; ``{"ok": True, "record": ...}`` or ``{"ok": False, "error"}``."""
    from .checkpoints import state_sha256
    from .runner import _method
    from .runtime import resolve_device
    from .training import numerics

    t0 = time.perf_counter()
    try:
        task = _task_of(job.config)
        device = resolve_device(machine.device)
        if job.method in CONTROLS:  # a cached reference: the retrained model of this seed, or the original
            ref = _reference(job.method, task, job.seed, machine.cache_dir, device)
            model = ref.model
            extra = {"sha256": ref.meta["sha256"], "cached": ref.cached,
                     "runtime_s": ref.meta["train_time_s"], "numerics": ref.meta.get("numerics")}
        else:
            original = _reference("original", task, task.cfg.seed, machine.cache_dir, device)
            method = _method(job.method, task.preset, task.bundle, task.split, task.cfg)
            res = method.unlearn(original.model, task.split, original=original.model, device=device,
                                 seed=job.seed, progress=False)
            model = res.model
            extra = {"sha256": state_sha256(model.state_dict()), "runtime_s": res.runtime_s,
                     "stop_reason": res.stop_reason, "numerics": numerics()}
        record = {"job": job.name, "key": job.key, "role": job.role, "method": job.method, "seed": job.seed,
                  **extra, **measure(model, task.split, device), "wall_s": time.perf_counter() - t0}
        return {"ok": True, "record": record}
    except KeyboardInterrupt:
        raise
    except Exception as e:  # a failing job is reported, the others go on
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}


# ---------------------------------------------------------------------------------------------
# validation, jobs, scores, files (the calling process)


def _plain(x) -> dict:
    return json.loads(json.dumps(x, sort_keys=True, default=str))


def _count(value, what: str, low: int, high: int | None = None, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise UserError(f"{what} must be an integer, not {value!r}")
    if value < low or (high is not None and value > high):
        span = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise UserError(f"{what} must be {span}, got {value}{why}")
    return int(value)


RUNS_WHY = (": the forget score's scale ends at ceil(log(runs - 1)), which is 0 (no bucket: every method "
            "would score 0) for 2 runs and undefined for 1")


def _method_list(methods) -> list[str]:
    from .methods.names import method_names

    given = methods.split(",") if isinstance(methods, str) else methods
    names = [str(m).strip() for m in given if str(m).strip()]
    if not names:
        raise UserError("no method given: pass --methods (e.g. finetune,salun)")
    every = [n.lower() for n in names] == ["all"]
    out = method_names(names)
    if "retrain" in out:
        if not every:
            raise UserError("retrain is the reference here, not a method: the retrain control (--controls, "
                            "on by default) scores more retrained models")
        out.remove("retrain")
    return out


def _runs_for(runs_for: dict | None, names: list[str], runs: int) -> dict[str, int]:
    out, given = {}, {}
    for name, n in (runs_for or {}).items():
        c = METHODS.canonical(str(name).strip())
        if c not in names:
            raise UserError(f"--runs-for names {name!r}, which is not among the methods ({', '.join(names)})")
        if c in given:  # finetune=3,FT=3: one method through an alias; the last count would win silently
            raise UserError(f"--runs-for names {c} twice ({given[c]!r} and {name!r}); give each method once")
        given[c] = name
        out[c] = _count(n, f"--runs-for {name}", MIN_RUNS, runs,
                        f" (at most --runs; at least {MIN_RUNS}{RUNS_WHY})")
    return out


def _job_keys(task: _Task) -> dict:
    from .training import TRAINING_CODE_VERSION

    return {"format": JOB_FORMAT, "dataset": task.bundle.fingerprint(), "split_hash": task.split.split_hash,
            "model": task.model_name, "model_kwargs": task.model_kwargs, "recipe": task.recipe.to_dict(),
            "training_code": TRAINING_CODE_VERSION}


def _load(path: Path, job: Job, n_forget: int) -> dict | None:
    """The stored record of ``job`` if it is whole and made for the same key, else None (a device or a FIFO
    in its place is not opened: the job runs again and its record replaces it)."""
    if validate.special_kind(path) is not None:
        return None
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("key") != job.key or len(rec.get("confs", ())) != n_forget:
        return None
    return rec


def _stats(values: list[float]) -> dict:
    a = np.asarray(values, dtype=np.float64)
    return {"mean": float(a.mean()), "std": float(a.std())}


def _row(recs: list[dict], refs: list[dict], control: bool, note: str = "") -> dict:
    from .metrics import final_score, forget_score, forget_score_interval

    u = np.array([r["confs"] for r in recs])
    r = np.array([x["confs"] for x in refs])
    row = {"control": control, "runs": len(recs), "seeds": [x["seed"] for x in recs],
           "compared_with": {"retrained_runs": len(refs), "seeds": [x["seed"] for x in refs]},
           **{k: _stats([x[k] for x in recs]) for k in ("retain_acc", "test_acc", "forget_acc")},
           "runtime_s": _stats([x["runtime_s"] for x in recs]),
           "wall_s": float(sum(x["wall_s"] for x in {x["job"]: x for x in recs}.values())),
           "forget_score": None, "final_score": None, "max_epsilon": None, "epsilons": None,
           "forget_score_ci": None, "final_score_ci": None, "error": None}
    if all("forget_true_acc" in x for x in recs):  # the flipped-label task
        row["forget_true_acc"] = _stats([x["forget_true_acc"] for x in recs])
    if note:
        row["note"] = note
    try:
        fs = forget_score(u, r)
    except ValueError as e:  # every threshold discarded for some example (see metrics.forgetting_quality_metric)
        row["error"] = str(e)
        return row
    def final(score: float) -> float:
        return final_score(score, [x["retain_acc"] for x in recs], [x["retain_acc"] for x in refs],
                           [x["test_acc"] for x in recs], [x["test_acc"] for x in refs])

    low, high = forget_score_interval(fs.epsilons, fs.num_models, n_boot=N_BOOT, seed=BOOT_SEED, level=LEVEL)
    row.update(forget_score=fs.score, max_epsilon=fs.max_epsilon, epsilons=fs.epsilons.tolist(),
               final_score=final(fs.score), forget_score_ci=[low, high], final_score_ci=[final(low), final(high)])
    return row


def forgetting_quality(*, dataset: str, model: str = "small_cnn", forget_classes=None, forget_random=None,
                       forget_flipped=None, methods, runs: int = 32, runs_for: dict | None = None, seed: int = 0,
                       data_seed: int = 0, epochs: int | None = None, preset: str = "auto",
                       out="runs/forgetting_quality", cache_dir=None, data_dir="data", download: bool = False,
                       device: str = "auto", jobs: int = 1, executor: str = "local",
                       address: str | None = None, controls: bool = True, progress: bool = True) -> dict:
    """Score ``methods`` by the challenge's forgetting quality; writes and returns forgetting_quality.json.

    ``forget_classes`` (a list or ``"3,8"``), ``forget_random`` (a fraction in (0, 1) or a count)
    or ``forget_flipped`` (a fraction in (0, 0.5) of train trained with flipped labels; scored on those
    labels, module docstring) say what to forget, exactly one, as ``unlearnkit run``'s options.
    ``runs`` = N models each side (at least 3), ``runs_for`` = ``{method: n}`` with 3 <= n <= N. Every
    value is checked before any training (:class:`UserError`); failing jobs raise
    :class:`JobsFailedError` at the end, after the others have finished and been stored. Returns the
    content of forgetting_quality.json (each method's row with ``forget_score_ci`` and ``final_score_ci``).
    """
    from rich.markup import escape

    from .bench.executors import make_executor
    from .progress import console
    from .runtime import resolve_device
    from .training import check_cache_dir, check_model

    t_start = time.perf_counter()
    # --- every user value, before any training or writing
    cfg, names, per_method, runs = _checked_config(
        dataset=dataset, model=model, forget_classes=forget_classes, forget_random=forget_random,
        forget_flipped=forget_flipped, methods=methods, runs=runs, runs_for=runs_for, seed=seed, data_seed=data_seed,
        epochs=epochs, preset=preset, out=out, cache_dir=cache_dir, data_dir=data_dir, download=download, device=device)
    validate.output_dir("--out", out)  # before any training: results that cannot be written are lost time
    check_cache_dir("--cache-dir", cache_dir)
    dev = resolve_device(device)
    ex = make_executor(executor, jobs, address)
    task = _task(cfg)
    check_model(task.model_name, task.bundle, task.model_kwargs)
    plan = _Plan(task, names, per_method, runs, cfg.seed, controls)
    cfg, split, out = task.cfg, task.split, Path(out)
    _TASKS.clear()
    _TASKS[json.dumps(cfg.to_dict(), sort_keys=True, default=str)] = task  # in-process jobs reuse it

    console.print(f"[bold]{escape(task.bundle.name)}[/] forget {escape(split.spec.describe())}: "
                  f"{len(split.train_forget)} train samples; model {escape(str(cfg.model))}; {runs} runs "
                  f"each side; device {dev}", highlight=False)
    original = _reference("original", task, cfg.seed, cfg.cache_dir, dev, progress)
    todo = plan.jobs(original.meta["sha256"])
    machine = Machine(out=str(out), cache_dir=cfg.cache_dir, device=str(dev), data_dir=cfg.data_dir,
                      download=cfg.download)
    records, n_run = _execute(todo, out / "jobs", len(split.train_forget), ex, machine, jobs=jobs,
                              progress=progress)
    given = {"dataset": dataset, "epochs": epochs, "preset": preset, "device": device, "jobs": jobs,
             "executor": executor, "address": address}
    results = _results(plan, records, todo, original, given=given, out=out, device=dev,
                       jobs_info={"total": len(todo), "run": n_run, "reused": len(todo) - n_run},
                       wall_s=time.perf_counter() - t_start)
    write_outputs(results, out)
    return results


def _checked_config(*, dataset, model, forget_classes, forget_random, forget_flipped, methods, runs, runs_for, seed,
                    data_seed, epochs, preset, out, cache_dir, data_dir, download,
                    device) -> tuple[RunConfig, list[str], dict, int]:
    """Every value of a call checked (:class:`UserError`): the run configuration, the canonical method
    names, runs per method, and N."""
    from .config import parse_int_list

    runs = _count(runs, "--runs", MIN_RUNS, why=RUNS_WHY)
    names = _method_list(methods)
    per_method = {name: runs for name in names} | _runs_for(runs_for, names, runs)
    seed = _count(seed, "--seed", 0)
    data_seed = _count(data_seed, "--data-seed", 0)
    if epochs is not None:
        epochs = _count(epochs, "--epochs", 1)
    if isinstance(forget_classes, str):
        forget_classes = parse_int_list(forget_classes, "--forget-classes")
    if forget_random is not None:
        forget_random = validate.forget_random("--forget-random", forget_random)
    if forget_flipped is not None:
        forget_flipped = validate.forget_flipped("--forget-flipped", forget_flipped)  # run's check
    given = [o for o, v in (("--forget-classes", forget_classes or None), ("--forget-random", forget_random),
                            ("--forget-flipped", forget_flipped)) if v is not None]
    if len(given) != 1:
        raise UserError("say what to forget with exactly one of --forget-classes, --forget-random, --forget-flipped"
                        + (f", not {' and '.join(given)}" if given else ""))
    cfg = RunConfig(dataset=dataset, model=model, forget_classes=list(forget_classes or []),
                    forget_random=forget_random, forget_flipped=forget_flipped, methods=names, seed=seed,
                    data_seed=data_seed, recipe={"epochs": epochs} if epochs is not None else {}, preset=preset,
                    audit=False, out=str(out), data_dir=str(data_dir), download=download, device=device,
                    cache_dir=str(cache_dir) if cache_dir else None)
    return cfg, names, per_method, runs


@dataclass
class _Plan:
    """Which jobs one call needs: N retrains, n runs per method, and the controls."""

    task: _Task
    names: list[str]
    per_method: dict[str, int]
    runs: int
    seed: int
    controls: bool

    def __post_init__(self) -> None:
        from .runner import _method

        t = self.task
        self.methods_obj = {name: _method(name, t.preset, t.bundle, t.split, t.cfg) for name in self.names}

    def job(self, role: str, method: str, s: int, original_sha256: str) -> Job:
        """A retrained model depends on the task and its seed; the others on the original too."""
        key = {**_job_keys(self.task), "method": method, "seed": s}
        if method in self.methods_obj:
            key.update(params=self.methods_obj[method].params(), preset=self.task.preset)
        if method != "retrain":
            key.update(original_seed=self.seed, original_sha256=original_sha256)
        return Job(role, method, s, self.task.cfg.to_dict(), _plain(key))

    def jobs(self, original_sha256: str) -> list[Job]:
        seed, runs, sha = self.seed, self.runs, original_sha256
        todo = [self.job("reference", "retrain", seed + 1 + i, sha) for i in range(runs)]
        todo += [self.job("method", name, seed + 1 + i, sha) for name in self.names
                 for i in range(self.per_method[name])]
        if self.controls:
            todo += [self.job("control", "retrain", seed + 1 + runs + i, sha) for i in range(runs)]
            todo.append(self.job("control", "original", seed, sha))
        return todo

    def rows(self, records: dict[str, dict], todo: list[Job]) -> dict[str, dict]:
        """One scored row per method, and the controls' rows (more retrains at the top, the original)."""
        def recs(role: str, method: str) -> list[dict]:
            return [records[j.name] for j in todo if j.role == role and j.method == method]

        seed, runs = self.seed, self.runs
        refs = recs("reference", "retrain")
        rows: dict[str, dict] = {}
        if self.controls:
            rows["retrain"] = _row(recs("control", "retrain"), refs, True,
                                   f"{runs} more retrained models (seeds {seed + runs + 1}..{seed + 2 * runs})")
        for name in self.names:
            n = self.per_method[name]
            note = f"{n} of {runs} runs: compared with the first {n} retrained models" if n < runs else ""
            rows[name] = _row(recs("method", name), refs[:n], False, note)
        if self.controls:
            orig = records[todo[-1].name]
            rows["original"] = _row([orig] * runs, refs, True, f"the original model itself, {runs} times")
        return rows


def _execute(todo: list[Job], folder: Path, n_forget: int, ex, machine, *, jobs: int,
             progress: bool) -> tuple[dict[str, dict], int]:
    """Run the jobs not stored yet (each stored as it finishes); all records and how many ran."""
    from rich.markup import escape

    from .progress import bar, console

    records: dict[str, dict] = {}
    for j in todo:
        rec = _load(folder / f"{j.name}.json", j, n_forget)
        if rec is not None:
            records[j.name] = rec
    pending = [j for j in todo if j.name not in records]
    parallel = f", {jobs} jobs" if jobs > 1 else ""
    console.print(f"{len(todo)} jobs: {len(records)} stored before, {len(pending)} to run "
                  f"({ex.name} executor{parallel})", markup=False, highlight=False)
    failed: list[tuple[str, str]] = []
    if pending:
        ex.start()  # workers first: no progress-bar thread runs when they fork
    with bar(len(pending), "forgetting quality", enabled=progress) as b:
        for event, j, result in ex.run(pending, machine, execute_job):
            if event != "done":
                continue
            if result.get("ok"):
                atomic_write_text(folder / f"{j.name}.json", json.dumps(result["record"], allow_nan=False) + "\n")
                records[j.name] = result["record"]
            else:
                failed.append((j.name, result.get("error", "unknown error")))
                console.print(f"[red]job {escape(j.name)} failed:[/] {escape(str(result.get('error')))}",
                              highlight=False)
            b.update(1, last=j.name)
    if failed:
        raise JobsFailedError(f"{len(failed)} of {len(pending)} job(s) failed, e.g. {failed[0][0]}: "
                              f"{failed[0][1]}; the {len(records)} finished ones are stored in {folder}: run "
                              f"again to retry")
    return records, len(pending)


def _numerics_seen(records: dict, todo: list[Job]) -> list[dict]:
    """The distinct thread counts and CPU kernels the models were made with (training.numerics; a
    record stored by an older release, or a reference cached before, has none and is left out)."""
    seen = {json.dumps(n, sort_keys=True) for j in todo if (n := records[j.name].get("numerics"))}
    return [json.loads(n) for n in sorted(seen)]


def _results(plan: _Plan, records: dict, todo: list[Job], original, *, given: dict, out: Path, device,
             jobs_info: dict, wall_s: float) -> dict:
    """forgetting_quality.json's content (NaN as null)."""
    from .runner import git_commit
    from .training import versions

    task, cfg, split = plan.task, plan.task.cfg, plan.task.split
    refs = [records[j.name] for j in todo if j.role == "reference" and METHODS.get(j.method).is_reference]
    return validate.finite_or_none({
        "schema": SCHEMA,
        "config": {"dataset": given["dataset"], "model": cfg.model, "forget_classes": cfg.forget_classes,
                   "forget_random": cfg.forget_random, "forget_flipped": cfg.forget_flipped,
                   "methods": plan.names, "runs": plan.runs,
                   "runs_for": plan.per_method, "seed": plan.seed, "data_seed": cfg.data_seed,
                   "epochs": given["epochs"], "preset": given["preset"], "out": str(out),
                   "cache_dir": cfg.cache_dir, "data_dir": cfg.data_dir, "device": given["device"],
                   "jobs": given["jobs"], "executor": given["executor"], "address": given["address"],
                   "controls": plan.controls},
        "provenance": {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       "reference": REFERENCE,
                       "versions": versions(), "git_commit": git_commit(), "device": str(device),
                       "recipe": task.recipe.to_dict(), "preset": task.preset,
                       "method_params": {n: _plain(m.params()) for n, m in plan.methods_obj.items()},
                       "original_sha256": original.meta["sha256"], "original_seed": plan.seed,
                       "jobs": jobs_info, "wall_s": wall_s, "numerics": _numerics_seen(records, todo)},
        "task": {"dataset": task.bundle.name, "model": cfg.model, "forget": split.spec.to_dict(),
                 "split_hash": split.split_hash, "n_train_forget": len(split.train_forget),
                 "forget_indices": [int(i) for i in split.forget_indices],
                 "test_set": "test samples of the retained classes" if split.spec.kind == "classes"
                 else "the whole test set",
                 "confidence": "logit-scaled: log p_y - log(1 - p_y), float64"
                 + (FLIPPED_NOTE if split.spec.kind == "flipped" else "")},
        "retrained": {"runs": plan.runs, "seeds": [x["seed"] for x in refs],
                      "cached": sum(bool(x.get("cached")) for x in refs),
                      **{k: _stats([x[k] for x in refs]) for k in ("retain_acc", "test_acc", "forget_acc")}},
        "methods": plan.rows(records, todo),
    })


# ---------------------------------------------------------------------------------------------
# files


def label(name: str, row: dict) -> str:
    return f"{name} (control)" if row.get("control") else name


def table_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """The table's header and one row of cells per method; the final score with its 95 % bootstrap
    interval over forget examples (``0.240 [0.221, 0.259]``; rows written before the interval get it
    from their stored epsilons: :func:`row_intervals`)."""
    header = ["method", "runs", "forget quality", "final score [95% CI]", "retain acc", "test acc", "forget acc"]

    def num(v, fmt="{:.4f}"):
        return "n/a" if v is None else fmt.format(v)

    def acc(s):
        return f"{s['mean']:.2f} ± {s['std']:.2f}"

    def final(r):
        ci = row_intervals(r)[1]
        return num(r["final_score"], "{:.3f}") + ("" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]")

    rows = [[label(n, r), str(r["runs"]), num(r["forget_score"]), final(r), acc(r["retain_acc"]),
             acc(r["test_acc"]), acc(r["forget_acc"])] for n, r in results["methods"].items()]
    return header, rows


def row_intervals(row: dict) -> tuple[list[float] | None, list[float] | None]:
    """``(forget_score_ci, final_score_ci)`` of a stored row: its own, else (a row written before them)
    the forget score's from its epsilons and the final score's by the same accuracy ratio as its point
    value; None where the row has no score."""
    from .metrics.forgetting_quality_metric import forget_score_interval

    if row.get("forget_score_ci") is not None or not row.get("epsilons") or row.get("final_score") is None:
        return row.get("forget_score_ci"), row.get("final_score_ci")
    low, high = forget_score_interval(row["epsilons"], row["runs"], n_boot=N_BOOT, seed=BOOT_SEED, level=LEVEL)
    fs, final = row["forget_score"], row["final_score"]
    ratio = final / fs if fs else None  # the accuracy ratios; unknown from a zero forget score
    return [low, high], None if ratio is None else [low * ratio, high * ratio]


def results_markdown(results: dict) -> str:
    from .markdown import markdown_table

    t, c = results["task"], results["config"]
    header, rows = table_rows(results)
    rows_ = results["methods"]
    scale = next((r["max_epsilon"] for r in rows_.values() if r["max_epsilon"] is not None), None)
    notes = [f"- {label(n, r)}: {r['note']}" for n, r in rows_.items() if r.get("note")]
    notes += [f"- {label(n, r)}: no score: {r['error']}" for n, r in rows_.items() if r.get("error")]
    end = "n/a" if scale is None else f"{scale:g}"
    lines = [f"# Forgetting quality: {t['dataset']} / {t['model']}, forget {_describe(t['forget'])}", "",
             f"The forget score of {REFERENCE}: per forget example, the (eps, 1e-5) that threshold attacks "
             f"find between its logit-scaled confidence under {c['runs']} unlearned and {c['runs']} "
             f"retrained models; an example scores 1, 1/2, 1/4, ... for eps in [0, 0.5), [0.5, 1), ... up to "
             f"ceil(log(N - 1)) = {end} and 0 beyond; 1 = indistinguishable from retraining. Final score = "
             f"forget quality x mean retain acc / retrained's x mean test acc / retrained's. "
             f"{t['n_train_forget']} forget examples, split {t['split_hash']}; accuracies in % (mean ± std "
             f"over runs), test acc on {t['test_set']}{FLIPPED_NOTE if t['forget'].get('flipped') else ''}. "
             f"Final score's interval: 95 % percentile bootstrap over forget examples ({N_BOOT} resamples of "
             f"the per-example eps), the models held fixed.", "",
             *markdown_table(header, rows)]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def _describe(f: dict) -> str:
    if f.get("flipped") is not None:
        return describe_forget(f)
    if f["kind"] == "classes":
        return f"classes {','.join(map(str, f['classes']))}"
    return f"random {f['random']:g}"


@literal_text
def plot(results: dict, path: Path) -> None:
    """Per method, a histogram of the per-example eps on the shared axis 0..50 (names printed literally)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .metrics.forgetting_quality_metric import EPSILON_CAP

    rows = list(results["methods"].items())
    fig, axes = plt.subplots(len(rows), 1, figsize=(7, 1.5 + 1.4 * len(rows)), sharex=True, squeeze=False)
    bins = np.linspace(0, EPSILON_CAP, 101)
    for ax, (name, row) in zip(axes[:, 0], rows):
        if row["epsilons"] is not None:
            ax.hist(row["epsilons"], bins=bins, color="tab:gray" if row["control"] else "tab:blue")
            ax.axvline(row["max_epsilon"], color="tab:red", linestyle="--", linewidth=1)
        score = "n/a" if row["forget_score"] is None else f"{row['forget_score']:.3f}"
        ax.set_title(f"{label(name, row)}: forget quality {score} ({row['runs']} runs)", fontsize=9,
                     loc="left", usetex=False, parse_math=False)
        ax.set_ylabel("examples", fontsize=8)
    axes[-1, 0].set_xlim(0, EPSILON_CAP)
    axes[-1, 0].set_xlabel("per-example epsilon (dashed: where the score's scale ends)", fontsize=8)
    fig.tight_layout()
    try:
        atomic_write_bytes(path, lambda f: fig.savefig(f, format="png", dpi=110))
    finally:
        plt.close(fig)


def write_outputs(results: dict, out: Path) -> None:
    """forgetting_quality.json, .md and .png, together (all three, or on a full disk none)."""
    def write(folder: Path) -> dict:
        paths = {k: folder / f"forgetting_quality.{k}" for k in ("json", "md", "png")}
        atomic_write_text(paths["json"], json.dumps(results, indent=2, allow_nan=False) + "\n")
        atomic_write_text(paths["md"], results_markdown(results))
        plot(results, paths["png"])
        return paths

    write_together(out, write)
