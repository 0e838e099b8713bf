"""Sequential deletion requests: a stream of requests applied in order to one model (issue 32).

A deployed model receives deletion requests one after another: class 3 today, 5 % of what remains
next week, class 7 next month. :func:`run_stream` (``unlearnkit stream``, ``uk.unlearn_sequence``)
applies each request to the model the previous request left, with every method, and after each one:

* audits the method's model with the audit ``run`` uses (:meth:`unlearnkit.runner.Evaluation.audit`)
  against references retrained without the UNION of everything deleted so far (through
  :func:`unlearnkit.training.reference_model`'s cache: the step's split hash is that of the union, so
  ``unlearnkit run --forget-indices <out>/deleted_indices.txt`` reuses the last step's references);
  the audit's "original" (its positive control) is the model trained on all the data;
* records the verdict, forget / retain / test accuracy, Gap to the retrain (as ``run`` computes it),
  the penultimate layer's separability, the method's runtime, and its cumulative cost (runtimes, plus
  a retrain wherever the fallback fired) against the cumulative cost of retraining at every step;
* re-checks every earlier request's forget set: the model's accuracy on it against the retrain's,
  as the "excess" in points: for a class request the accuracy difference; for samples (random,
  indices) the difference of each model's accuracy on them less its own test accuracy, so a model
  that merely generalises better than the retrain does not count as remembering. A set has
  **resurfaced** when its excess is above the margin ``100 / sqrt(n)`` points (two worst-case binomial
  standard errors of its ``n`` samples) although the model carried on right after its own request was
  within that margin. A sample set is re-checked on its rows whose class is still kept: rows of a class
  a later request deleted whole are that request's to check (:func:`_earlier_sets`);
* with ``fallback="retrain"``, replaces the model by the retrain (the first reference) whenever the
  verdict is not ``erased``, and records that it fired.

Each step's data: ``train_forget`` = this request's samples, ``train_retain`` = the training split
less everything deleted so far, the test set less the classes earlier requests deleted (its forget
part: this request's classes). A ``random`` request draws a fraction (or a count) of what remains,
with ``numpy.random.RandomState([data_seed, step])``: the same stream and seed draw the same samples.

Methods that read the original (SCRUB's and the bad teacher's teachers, PURGE's frozen statistics and
retain-confusion target, boundary shrink's neighbour labels) get the model before this request as
their original: what was deleted earlier stays deleted in the teacher. Methods keep nothing else
across requests (SalUn computes its saliency mask anew for each request's forget set).

Storage: after each step every method's model is a checkpoint ``<out>/steps/<k>/models/<method>.pt``
whose metadata holds that step's numbers and a hash of everything they depend on (the stream up to
this step, the method and its hyperparameters, seeds, references, audit settings); ``results.json``
(the last finished step's rows, as ``run`` writes them, plus ``stream``: every step) and
``results.md`` are rewritten atomically after each step. A killed stream run again resumes at the
first step not stored: the stored steps are read, not recomputed, so their numbers are identical.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from rich.markup import escape
from torch import nn

from . import validate
from .checkpoints import LockBusy, atomic_write_text, file_lock, load_checkpoint, lock_held, save_checkpoint
from .config import RunConfig
from .data.splits import ForgetSpec, UnlearningSplit, read_indices, split_hash
from .errors import CheckpointError, UserError
from .markdown import markdown_table
from .methods import METHODS
from .metrics.accuracy import accuracy
from .models.features import LOGITS, extract
from .results import layer_value
from .runner import (
    Evaluation,
    Experiment,
    References,
    assemble,
    prepare,
    summary_metrics,
    task_params,
    train_references,
    write_results,
)
from .training import numerics, versions

log = logging.getLogger(__name__)

#: the keys a request may have (one each); ``concept`` is refused with a reason (:func:`parse_requests`)
KINDS = ("classes", "random", "indices", "concept")
FALLBACKS = ("none", "retrain")
#: RunConfig keys that say what to forget: a stream's requests say it instead
FORGET_KEYS = ("forget_classes", "forget_random", "forget_indices", "forget_flipped", "task", "concept")
DELETED_FILE = "deleted_indices.txt"


# --- requests ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    """One deletion request: whole ``classes``, a ``random`` fraction (or count) of what remains, or
    training ``indices`` (positions in the dataset's training split; ``source``: the file they came from)."""

    kind: str
    classes: tuple[int, ...] = ()
    random: float | None = None
    indices: tuple[int, ...] = ()
    source: str | None = None

    def describe(self) -> str:
        """``class 3``, ``random 5 % of what remains``, ``12 indices`` (from a file: its name)."""
        if self.kind == "classes":
            return f"class{'es' if len(self.classes) > 1 else ''} {','.join(map(str, self.classes))}"
        if self.kind == "random":
            r = self.random
            return f"random {r * 100:g} % of what remains" if r < 1 else f"random {int(r)} of what remains"
        return f"{len(self.indices)} indices" + (f" from {Path(self.source).name}" if self.source else "")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "classes": list(self.classes), "random": self.random,
                "indices": list(self.indices), "source": self.source}


def parse_requests(data, where: str = "requests", base: Path | None = None) -> list[Request]:
    """The requests of a list of mappings, each with exactly one key: ``classes`` (a list or ``3``),
    ``random`` (a fraction in (0, 1) or a count >= 1) or ``indices`` (a list of whole numbers, or a file
    of them, relative to ``base``). Returns the :class:`Request` list; any problem is one
    :class:`UserError` naming ``where`` and the request (counted from 1). What needs the data (a class
    already deleted, a fraction over what remains...) is checked by :func:`resolve`."""
    if isinstance(data, (str, bytes, dict)) or not isinstance(data, (list, tuple)):
        raise UserError(f"{where} must be a list of requests such as [{{classes: [3]}}, {{random: 0.05}}], "
                        f"not {type(data).__name__}")
    if not data:
        raise UserError(f"{where} is empty: give at least one request")
    return [_request(item, f"{where}: request {i}", base) for i, item in enumerate(data, 1)]


def _request(item, where: str, base: Path | None) -> Request:
    if not isinstance(item, dict):
        raise UserError(f"{where} must be a mapping with one key (classes, random or indices), not "
                        f"{type(item).__name__}")
    keys = [str(k) for k in item]
    unknown = [k for k in keys if k not in KINDS]
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r}{validate.suggestion(unknown[0], KINDS[:3])}; a "
                        f"request is one of classes, random, indices")
    if len(keys) != 1:
        raise UserError(f"{where} gives {', '.join(keys) or 'no key'}: give exactly one of classes, random, indices")
    kind, value = keys[0], next(iter(item.values()))
    if kind == "concept":
        raise UserError(f"{where}: concept requests are not supported in a stream (a TARF concept task relabels "
                        f"the data into its own label domain, which one model cannot carry from request to "
                        f"request); run it alone with unlearnkit run --task, or give classes, random or indices")
    if value is None or (isinstance(value, (list, tuple, str)) and not len(value)):
        raise UserError(f"{where}: {kind} is empty; an empty request deletes nothing")
    if kind == "classes":
        return Request("classes", classes=tuple(validate.int_list(f"{where}: classes", value)))
    if kind == "random":
        return Request("random", random=validate.forget_random(f"{where}: random", value))
    if isinstance(value, str):
        path = Path(value).expanduser()
        path = path if path.is_absolute() or base is None else base / path
        got = read_indices(path)
        if got.dtype == bool:
            raise UserError(f"{where}: indices file {path} holds a boolean mask; give whole-number indices")
        if not got.size:
            raise UserError(f"{where}: indices file {path} holds no index; an empty request deletes nothing")
        return Request("indices", indices=tuple(sorted(set(validate.int_list(f"{where}: indices", got.tolist())))),
                       source=str(path))
    return Request("indices", indices=tuple(sorted(set(validate.int_list(f"{where}: indices", value)))))


def read_requests(path: str | Path) -> list[Request]:
    """The requests of a YAML file (:func:`unlearnkit.validate.yaml_file`: plain data, UTF-8, no key twice):
    a list of mappings (:func:`parse_requests`); indices files are read relative to the YAML file."""
    p, data = validate.yaml_file("--requests", path)
    return parse_requests(data, f"--requests {p}", p.parent)


# --- resolving requests against the data ---------------------------------------------------------

@dataclass
class Step:
    """One request resolved against the training split."""

    number: int                       # 1, 2, ...
    request: Request
    forget: np.ndarray                # the training indices this request deletes (sorted)
    deleted: np.ndarray               # every training index deleted up to and including this step (sorted)
    classes_before: tuple[int, ...]   # classes deleted whole by earlier requests


@dataclass
class _Ledger:
    """What is deleted so far: per training row, the step that deleted it (0: kept); per class, likewise."""

    by: np.ndarray
    gone: dict

    @property
    def deleted(self) -> np.ndarray:
        return self.by > 0


def resolve(requests: list[Request], bundle, data_seed: int = 0, where: str = "requests") -> list[Step]:
    """Every request against ``bundle``'s training split, in order, before any work: returns the
    :class:`Step` list. A class already deleted or with no sample left, an index out of range or already
    deleted, a draw of no sample or of everything that remains, a request that would leave nothing to
    retain: one :class:`UserError` naming ``where`` and the request."""
    y = bundle.train.y.numpy()
    ledger, steps = _Ledger(np.zeros(len(y), dtype=np.int64), {}), []
    for i, req in enumerate(requests, 1):
        at = f"{where}: request {i} ({req.describe()})"
        before = tuple(sorted(ledger.gone))
        forget = _draw(req, y, ledger, bundle, np.random.RandomState([data_seed, i]), at)
        if not forget.size:
            raise UserError(f"{at} selects no training sample: it deletes nothing")
        if int(ledger.deleted.sum()) + forget.size >= len(y):
            raise UserError(f"{at} would delete every remaining training sample: nothing would remain to retain")
        ledger.by[forget] = i
        ledger.gone.update({c: i for c in req.classes})
        steps.append(Step(i, req, forget, np.flatnonzero(ledger.deleted), before))
    return steps


def _draw(req: Request, y: np.ndarray, ledger: _Ledger, bundle, rng: np.random.RandomState, at: str) -> np.ndarray:
    """The training indices ``req`` deletes, given what ``ledger`` holds deleted already."""
    n, k = len(y), bundle.num_classes
    if req.kind == "classes":
        for c in req.classes:
            if not 0 <= c < k:
                raise UserError(f"{at}: class {c} is out of range for {bundle.name} (classes 0..{k - 1})")
            if c in ledger.gone:
                raise UserError(f"{at}: class {c} no longer exists: request {ledger.gone[c]} deleted it")
            if not np.any((y == c) & ~ledger.deleted):
                raise UserError(f"{at}: class {c} no longer exists: earlier requests deleted all its training samples")
        if len(set(ledger.gone) | set(req.classes)) >= k:
            raise UserError(f"{at} would delete every class of {bundle.name}: nothing would remain to retain")
        return np.flatnonzero(np.isin(y, req.classes) & ~ledger.deleted)
    if req.kind == "random":
        left = np.flatnonzero(~ledger.deleted)
        count = int(round(req.random * left.size)) if req.random < 1 else int(req.random)
        if count >= left.size:
            raise UserError(f"{at} asks for {count} of the {left.size} training samples that remain: nothing "
                            f"would remain to retain")
        return np.sort(rng.choice(left, count, replace=False)) if count else left[:0]
    idx = np.asarray(req.indices, dtype=np.int64)
    if idx.max() >= n:
        raise UserError(f"{at}: index {int(idx.max())} is out of range: {bundle.name} has {n} training samples "
                        f"(0..{n - 1})")
    again = idx[ledger.deleted[idx]]
    if again.size:
        raise UserError(f"{at}: index {int(again[0])} was already deleted by request {int(ledger.by[again[0]])}")
    return idx


def step_split(bundle, step: Step) -> UnlearningSplit:
    """The :class:`UnlearningSplit` of one step (module docstring); its split hash is the union's, so the
    retrained references are cached by everything deleted so far."""
    train, n = bundle.train, len(bundle.train)
    keep = np.ones(n, dtype=bool)
    keep[step.deleted] = False
    test = bundle.test.subset(torch.from_numpy(np.flatnonzero(~np.isin(bundle.test.y.numpy(), step.classes_before))))
    test.index = torch.arange(len(test))  # the step's test set: positions in it (evaluation indexes its logits)
    now = np.isin(test.y.numpy(), step.request.classes)
    spec = ForgetSpec(classes=step.request.classes) if step.request.kind == "classes" else \
        ForgetSpec(samples=int(step.forget.size))
    return UnlearningSplit(dataset=bundle, spec=spec, forget_indices=step.forget,
                           train_forget=train.subset(torch.from_numpy(step.forget)),
                           train_retain=train.subset(torch.from_numpy(np.flatnonzero(keep))),
                           test_forget=test.subset(torch.from_numpy(np.flatnonzero(now))),
                           test_retain=test.subset(torch.from_numpy(np.flatnonzero(~now))),
                           test=test, val=bundle.val, split_hash=split_hash(bundle, step.deleted))


# --- running a stream ----------------------------------------------------------------------------

@dataclass
class StreamResults:
    """What :func:`run_stream` found: ``results`` (results.json: the last step's rows as ``run`` writes
    them, and ``stream`` with every step) and ``models`` (each method's model after the last request:
    the retrain where the fallback fired)."""

    results: dict
    models: dict[str, nn.Module]

    @property
    def steps(self) -> list[dict]:
        """Per step: the request, its sizes, the retrain's numbers and ``methods: {name: record}``."""
        return self.results["stream"]["steps"]

    def to_dict(self) -> dict:
        return self.results


@dataclass
class _Carried:
    """One method's state between requests."""

    model: nn.Module
    cell: str = ""                 # the hash of the last step (chains the steps)
    cost_s: float = 0.0            # cumulative unlearning cost (runtimes + fallback retrains)
    excess: dict = dataclasses.field(default_factory=dict)   # step -> forget excess of the model carried on


def check_stream_config(cfg: RunConfig, fallback: str) -> None:
    """A stream's configuration: no forget keys (the requests say what to forget), the standard setting,
    ``fallback`` one of :data:`FALLBACKS`, and an audit when the fallback reads its verdict."""
    validate.choice("fallback", fallback, FALLBACKS)
    given = [k for k in FORGET_KEYS if getattr(cfg, k, None) not in (None, [], "")]
    if given:
        raise UserError(f"a stream's requests say what to forget: remove {given[0]} from the configuration")
    if cfg.setting != "standard":
        raise UserError(f"streams run in the standard setting, not {cfg.setting}")
    if fallback == "retrain" and not cfg.audit:
        raise UserError("--fallback retrain reads each step's verdict: it needs the audit (drop --no-audit)")


def run_stream(cfg: RunConfig, requests: list[Request], *, fallback: str = "none", progress: bool = True,
               where: str = "requests") -> StreamResults:
    """Apply ``requests`` in order with every method of ``cfg`` (module docstring); everything is checked
    (configuration, methods, every request against the data) before any model is trained. Writes
    ``cfg.out`` and resumes from it; returns the :class:`StreamResults`."""
    check_stream_config(cfg, fallback)
    holder = lock_held(Path(cfg.out) / LOCK_FILE)
    if holder is not None:  # before anything is read or printed; writing() takes the lock itself
        raise LockBusy(_busy(Path(cfg.out)) + holder)
    resolved: list[list[Step]] = []

    def build(c: RunConfig, bundle) -> UnlearningSplit:
        resolved.append(resolve(requests, bundle, c.data_seed, where))
        return step_split(bundle, resolved[0][0])

    exp = prepare(cfg, progress, build=build)
    methods = [n for n in exp.names if not METHODS.get(n).is_reference]
    if not methods:
        raise UserError("a stream needs a method besides retrain (the reference every step is audited against)")
    for name in methods:
        if "original" in METHODS.get(name).needs:
            log.info("%s reads the original: in a stream that is the model before each request", name)
    with writing(exp.out):
        return _Stream(exp, resolved[0], methods, fallback).run()


#: the lock file a running stream holds in its folder (removed when it ends)
LOCK_FILE = ".stream.lock"


def writing(out: Path):
    """The lock on a stream's folder ``out`` (made when missing): a second stream into the same folder is
    refused at once with one line, before it writes anything (both would write the same steps and
    results.json). The lock goes with the process: a killed stream leaves none that blocks the rerun."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        from .errors import WriteFailed

        raise WriteFailed(e.errno, e.strerror, str(out)) from None
    return file_lock(out / LOCK_FILE, wait=False, busy=_busy(out))


def _busy(out: Path) -> str:
    return f"another unlearnkit stream is writing {out}: wait for it to finish, or give another --out"


class _Stream:
    """The steps of one stream, in order, every method at each step (the step's references shared)."""

    def __init__(self, exp: Experiment, steps: list[Step], methods: list[str], fallback: str) -> None:
        self.exp, self.steps, self.methods, self.fallback = exp, steps, methods, fallback
        self.carried: dict[str, _Carried] = {}
        self.done: list[dict] = []        # per finished step: its summary and the methods' records
        self.rows: dict = {}              # the last finished step's results.json rows

    def run(self) -> StreamResults:
        refs = None
        for step in self.steps:
            refs = self.step(step)
        return StreamResults(self.write(self.steps[-1], refs), {n: c.model for n, c in self.carried.items()})

    def step(self, step: Step) -> References:
        """Every method's step ``step``: read from its checkpoint where stored, else unlearn, evaluate and
        audit; then results.json. Returns the step's references."""
        exp = self.exp
        split = step_split(exp.bundle, step)
        sexp = replace(exp, split=split, cfg=replace(exp.cfg, out=str(exp.out / "steps" / str(step.number))))
        exp.say(f"[bold]request {step.number}[/]: {escape(step.request.describe())}, {step.forget.size} samples "
                f"({step.deleted.size} deleted so far)")
        refs = train_references(sexp)
        if not self.carried:
            self.carried = {n: _Carried(refs.original.model) for n in self.methods}
        work = _StepWork(self, sexp, refs, step)
        records = {name: work.method(name) for name in self.methods}
        self.done.append({**work.summary(), "methods": records})
        self.rows = work.rows
        if step is not self.steps[-1]:
            self.write(step, refs)
        return refs

    def write(self, step: Step, refs: References) -> dict:
        """results.json (the last finished step's rows, ``stream``: every step), results.md and the union
        of deleted indices, each written atomically. Returns the results."""
        exp = self.exp
        sexp = replace(exp, split=step_split(exp.bundle, step))
        results = assemble(sexp, refs, copy.deepcopy(self.rows)).to_dict()
        deleted = exp.out / DELETED_FILE
        atomic_write_text(deleted, "".join(f"{i}\n" for i in step.deleted))
        results["task"].update(forget={"kind": "indices", "classes": [], "random": None, "indices_file": str(deleted),
                                       "task": None, "concept": []}, n_train_forget=int(step.deleted.size))
        results["stream"] = {"requests": [s.request.to_dict() for s in self.steps], "fallback": self.fallback,
                             "methods": self.methods, "n_requests": len(self.steps), "steps": self.done}
        write_results(results, exp.out)
        md = exp.out / "results.md"
        atomic_write_text(md, md.read_text() + "\n" + stream_markdown(results))
        return results


class _StepWork:
    """One step of a stream: its references' rows, the earlier forget sets, and each method's record."""

    def __init__(self, stream: _Stream, sexp: Experiment, refs: References, step: Step) -> None:
        self.stream, self.exp, self.refs, self.step = stream, sexp, refs, step
        self.evaluation: Evaluation | None = None
        self.rows: dict = {}
        self.references: dict | None = None   # the original's and retrain's rows (computed or stored)
        self.retrain_time = float(refs.retrain.meta["train_time_s"])
        self.earlier = _earlier_sets(stream.steps[:step.number - 1], step, sexp.bundle.train)
        self._retrain_earlier: list[float] | None = None

    def summary(self) -> dict:
        ref = self.references["retrain"]["metrics"]
        return {"step": self.step.number, "request": self.step.request.describe(),
                "n_forget": int(self.step.forget.size), "n_deleted": int(self.step.deleted.size),
                "split_hash": self.exp.split.split_hash,
                "retrain": {**{k: ref[k] for k in ("forget_acc", "retain_acc", "test_acc")},
                            "train_time_s": self.retrain_time}}

    def cell(self, name: str, method) -> str:
        """The hash of everything method ``name``'s step depends on (module docstring)."""
        cfg, exp = self.exp.cfg, self.exp
        audit = dataclasses.asdict(exp.audit_config) if exp.audit_config is not None else None
        payload = {"method": name, "params": method.params(), "original": self.refs.original.meta["sha256"],
                   "previous": self.stream.carried[name].cell, "forget": split_hash(exp.bundle, self.step.forget),
                   "deleted": exp.split.split_hash, "seed": cfg.seed, "fallback": self.stream.fallback,
                   "references": [r.meta["sha256"] for r in (self.refs.retrain, *self.refs.extra)],
                   "audit": audit, "test_convention": cfg.test_convention, **exp.runtime.cache_key()}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def method(self, name: str) -> dict:
        """Method ``name``'s record of this step: stored, or computed (and stored)."""
        exp = self.exp
        method = METHODS.get(name).from_preset(exp.preset, exp.bundle.name,
                                               **task_params(name, exp.split, exp.cfg.method_params.get(name, {})))
        cell = self.cell(name, method)
        path = exp.out / "models" / f"{name}.pt"
        stored = _stored(path, cell)
        if stored is None:
            stored = self.compute(name, method, cell, path)
        else:
            exp.say(f"{escape(name)}: step {self.step.number} read from {escape(str(path))}")
        model, payload = stored
        carried = self.stream.carried[name]
        carried.model, carried.cell = model, cell
        carried.cost_s = payload["record"]["cumulative_cost_s"]
        carried.excess[self.step.number] = payload["record"]["carried_excess"]
        self.references = self.references or payload["references"]
        self.rows = {**payload["references"], **self.rows, name: payload["row"]}
        return payload["record"]

    def compute(self, name: str, method, cell: str, path: Path) -> tuple[nn.Module, dict]:
        """Unlearn this step's request from the model the last one left, evaluate, audit, re-check the earlier
        forget sets, apply the fallback, and store the model carried on with the step's numbers."""
        exp, carried = self.exp, self.stream.carried[name]
        ev = self._evaluation()
        res = method.unlearn(carried.model, exp.split, original=carried.model, device=exp.device, seed=exp.cfg.seed,
                             progress=exp.progress, runtime=exp.runtime)
        outputs = ev.record(name, res.model, res.runtime_s, {
            "hyperparameters": method.params(), "preset": exp.preset, "needs": sorted(method.needs),
            "stop_reason": res.stop_reason, "history": res.history, "checkpoint": str(path),
            "paper": METHODS.get(name).paper})
        ev.audit(name, res.model, outputs)
        row = ev.models[name]
        verdict = (row.get("audit") or {}).get("verdict")
        fired = self.stream.fallback == "retrain" and verdict != "erased"
        keep = copy.deepcopy(self.refs.retrain.model) if fired else res.model
        record = self._record(name, row, verdict, fired, self._earlier(res.model, name, row))
        exp.say(f"{escape(name)} step {self.step.number}: {verdict or 'not audited'}"
                + (", fallback: retrained" if fired else ""))
        payload = {"record": record, "row": row, "references": self.references}
        text = payload_json(payload)
        save_checkpoint(keep, path, {"kind": "stream_step", "cell_hash": cell, "versions": versions(),
                                     "numerics": numerics(),
                                     "stream_step": text})
        return keep, json.loads(text)  # exactly what a resumed stream reads back

    def _evaluation(self) -> Evaluation:
        """The step's :class:`Evaluation` (the references evaluated once, on first need)."""
        if self.evaluation is None:
            self.evaluation = Evaluation(self.exp, self.refs)
            self.references = {k: copy.deepcopy(self.evaluation.models[k]) for k in ("original", "retrain")}
        return self.evaluation

    def _record(self, name: str, row: dict, verdict: str | None, fired: bool, earlier: list[dict]) -> dict:
        """The compact record of method ``name``'s step (what the stream tables show)."""
        carried = self.stream.carried[name]
        ref = self.references["retrain"]
        m = summary_metrics(row["metrics"], ref["metrics"], row["runtime_s"], ref["runtime_s"])
        cost = carried.cost_s + m["runtime_s"] + (self.retrain_time if fired else 0.0)
        retrain_cost = sum(s["retrain"]["train_time_s"] for s in self.stream.done) + self.retrain_time
        excess = self._excess(m["forget_acc"], ref["metrics"]["forget_acc"], self.step, row)
        audit = row.get("audit")
        return validate.finite_or_none({
            "step": self.step.number, "request": self.step.request.describe(), "verdict": verdict,
            **{k: m.get(k) for k in ("forget_acc", "retain_acc", "test_acc", "test_forget_acc", "mia_efficacy", "gap")},
            "separability": layer_value(audit, "separability"),
            "separability_ratio": layer_value(audit, "separability_ratio"),
            "runtime_s": m["runtime_s"], "cumulative_cost_s": cost, "cumulative_retrain_s": retrain_cost,
            "fallback": fired, "forget_excess": excess, "carried_excess": 0.0 if fired else excess,
            "resurfaced": sum(e["resurfaced"] for e in earlier), "earlier": earlier,
            "stop_reason": row.get("stop_reason")})

    def _excess(self, acc: float, retrain_acc: float, step: Step, row: dict) -> float:
        """Points by which the model (its ``row``) recognises ``step``'s forget set beyond the retrain: the
        accuracy difference for a class request; for samples, the difference of each model's accuracy on
        them less its own test accuracy (what a model that never saw them gets; module docstring)."""
        if step.request.kind == "classes":
            return acc - retrain_acc
        ref_test = self.references["retrain"]["metrics"]["test_retain_acc"]
        return (acc - row["metrics"]["test_retain_acc"]) - (retrain_acc - ref_test)

    def _earlier(self, model: nn.Module, name: str, row: dict) -> list[dict]:
        """Every earlier request's forget set re-checked (module docstring): the model's and the retrain's
        accuracy on it, the excess (:meth:`_excess`), its margin, and whether it resurfaced."""
        if self._retrain_earlier is None:
            self._retrain_earlier = [_accuracy(self.refs.retrain.model, d, self.exp.device) for _, d in self.earlier]
        out = []
        for (s, data), ref in zip(self.earlier, self._retrain_earlier):
            acc = _accuracy(model, data, self.exp.device)
            excess, margin = self._excess(acc, ref, s, row), 100.0 / math.sqrt(len(data))
            then = self.stream.carried[name].excess.get(s.number, 0.0)
            out.append({"step": s.number, "n": len(data), "forget_acc": acc, "retrain_acc": ref, "excess": excess,
                        "margin": margin, "resurfaced": bool(excess > margin and then <= margin)})
        return out


def _earlier_sets(before: list[Step], step: Step, train) -> list[tuple[Step, object]]:
    """The forget sets of the requests ``before`` ``step``, each as a subset of ``train``, to re-check at
    ``step``. A sample set (random, indices) loses its rows of the classes deleted whole so far (this
    step's included): those rows' accuracy falls with their class's deletion, in the retrain too, and is
    that class request's to check; counted here, a class still recognised by the model would read as
    the earlier samples resurfacing. A set left empty is not re-checked."""
    gone = set(step.classes_before) | (set(step.request.classes) if step.request.kind == "classes" else set())
    labels = train.y.numpy()
    out = []
    for s in before:
        rows = s.forget if s.request.kind == "classes" else s.forget[~np.isin(labels[s.forget], sorted(gone))]
        if rows.size:
            out.append((s, train.subset(torch.from_numpy(rows))))
    return out


def payload_json(payload: dict) -> str:
    """``payload`` as the JSON a stored step holds (what a resumed stream reads back: the same numbers)."""
    return json.dumps(payload, default=str)


def _stored(path: Path, cell: str) -> tuple[nn.Module, dict] | None:
    """The model and numbers of a stored step whose hash is ``cell``; None when missing or stale."""
    if not path.exists():
        return None
    try:
        model, meta = load_checkpoint(path)
    except CheckpointError as e:
        log.warning("stored stream step %s unusable (%s); computing it again", path, e)
        return None
    if meta.get("cell_hash") != cell or "stream_step" not in meta:
        return None
    return model, json.loads(meta["stream_step"])


def _accuracy(model: nn.Module, data, device) -> float:
    return accuracy(extract(model, data, [LOGITS], device=device)[LOGITS], data.y)


# --- tables --------------------------------------------------------------------------------------

STEP_COLUMNS = [("forget_acc", "forget acc", "{:.1f}"), ("retain_acc", "retain acc", "{:.1f}"),
                ("test_acc", "test acc", "{:.1f}"), ("gap", "Gap", "{:.2f}"),
                ("separability", "separability", "{:.3g}"), ("runtime_s", "time (s)", "{:.1f}")]


def _cell_text(value, spec: str) -> str:
    return "n/a" if value is None else spec.format(value)


def step_table(results: dict) -> tuple[list[str], list[list[str]]]:
    """``(header, rows)``: one row per method and step (the retrain first at each step) of a results dict
    holding a ``stream``: verdict, accuracies, Gap, separability, runtime, cumulative cost against
    retraining at every step, whether the fallback fired, and how many earlier forget sets resurfaced."""
    header = ["method", "step", "request", "verdict", *[c[1] for c in STEP_COLUMNS],
              "cumulative s (retrain s)", "fallback", "resurfaced"]
    rows, steps = [], results["stream"]["steps"]
    retrain_cost = 0.0
    for s in steps:
        retrain_cost += s["retrain"]["train_time_s"]
        rows.append(["retrain", str(s["step"]), s["request"], "", *[_cell_text(s["retrain"].get(k), f)
                     for k, _, f in STEP_COLUMNS[:3]], "0.00", "", f"{s['retrain']['train_time_s']:.1f}",
                     f"{retrain_cost:.1f}", "", ""])
    for name in results["stream"]["methods"]:
        for s in steps:
            r = s["methods"][name]
            rows.append([name, str(s["step"]), s["request"], r["verdict"] or "",
                         *[_cell_text(r.get(k), f) for k, _, f in STEP_COLUMNS],
                         f"{r['cumulative_cost_s']:.1f} ({r['cumulative_retrain_s']:.1f})",
                         "yes" if r["fallback"] else "",
                         f"{r['resurfaced']}/{len(r['earlier'])}" if r["earlier"] else ""])
    return header, rows


def stream_markdown(results: dict) -> str:
    """The stream's section of results.md: what each step deleted and :func:`step_table`."""
    stream = results["stream"]
    header, rows = step_table(results)
    done = len(stream["steps"])
    lines = [f"## Stream: {done} of {stream['n_requests']} requests done (fallback {stream['fallback']})", "",
             "Each step is audited against references retrained without everything deleted so far. Accuracies "
             "in %; Gap to that retrain; separability at the penultimate layer; cumulative s = the method's "
             "runtimes so far (plus a retrain where the fallback fired), in brackets retraining at every step; "
             "resurfaced = earlier forget sets whose accuracy rose above the retrain's again.", "",
             *markdown_table(header, rows)]
    return "\n".join(lines) + "\n"


# --- Python API ----------------------------------------------------------------------------------

def unlearn_sequence(model: str, method, requests, *, data: str = "digits", seed: int = 0, data_seed: int = 0,
                     references: int | None = None, fallback: str = "none", out: str | Path = "runs/stream",
                     cache_dir: str | Path | None = None, device: str = "auto", preset: str = "auto",
                     epochs: int | None = None, audit: bool = True, audit_config: dict | None = None,
                     progress: bool = False, **hyperparameters) -> StreamResults:
    """Apply deletion ``requests`` in order to one model and audit it after each (module docstring).

    ``model``: an architecture's name (``unlearnkit list models``): the original and every step's
    references are trained through the model cache, as ``unlearnkit run`` trains them. ``method``: a
    method name or a list of them; ``hyperparameters`` (keywords) need a single method. ``requests``: a
    list of mappings, each ``{"classes": [3]}``, ``{"random": 0.05}`` (of what remains) or ``{"indices":
    [...]}`` (training indices). ``data``: a dataset name. ``fallback="retrain"`` replaces the model by
    the retrain whenever the verdict is not ``erased``. ``audit_config``: overrides of
    :class:`~unlearnkit.AuditConfig`'s fields. ``out`` holds the stored steps: running the same
    call again resumes. Every argument is checked before any work (a :class:`UserError` naming it).
    Returns the :class:`StreamResults` (``.steps``: per step, every method's record; ``.models``)."""
    if not isinstance(model, str) or not model.strip():
        raise UserError(f"model must be a model name such as 'small_cnn' (unlearnkit list models), not "
                        f"{type(model).__name__}: a stream retrains its references without each step's deletions, "
                        f"which needs an architecture the model zoo builds")
    names = [method] if isinstance(method, str) else method
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise UserError(f"method must be a method name or a list of them, not {method!r}")
    if hyperparameters and len(names) != 1:
        raise UserError(f"hyperparameters {sorted(hyperparameters)} as keywords need one method, not {len(names)}")
    reqs = parse_requests(requests, "requests")
    validate.choice("fallback", fallback, FALLBACKS)
    cfg = RunConfig(dataset=validate.text("data", data), model=model, methods=list(names),
                    method_params={names[0]: dict(hyperparameters)} if hyperparameters else {}, seed=seed,
                    data_seed=data_seed, references=references, out=str(out),
                    cache_dir=None if cache_dir is None else str(cache_dir), device=device, preset=preset,
                    recipe={} if epochs is None else {"epochs": epochs}, audit=bool(audit),
                    audit_config=dict(audit_config or {}))
    return run_stream(cfg, reqs, fallback=fallback, progress=bool(progress))
