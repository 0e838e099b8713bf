"""``unlearnkit tune``: search a method's hyperparameters on the validation split, against retrain.

Presets tuned on one dataset do not transfer (SSD's ``small`` preset collapses retain accuracy on
another model); a search per task is the field's answer. This one:

* **never reads the test set**: every number comes from the training split's forget / retain parts
  and the *validation* split, which stands in for the test set everywhere (evaluation, membership
  inference, the audit's held-out data): :func:`validation_split`;
* **scores a trial against retrain's behaviour** on that data: TARF's Gap (mean |difference| to the
  retrained model of forget accuracy, retain accuracy, validation accuracy and MIA efficacy, in
  points) plus ``SEPARABILITY_WEIGHT`` points per unit of the audit's separability ratio above 1 at
  the penultimate layer (the statistic the verdict reads; 1 = as separable as in retrain). The
  weighting is our choice (INFERRED: no reference defines a tuning objective for unlearning); a trial
  whose output Gap is already worse than the median of earlier trials is pruned before its audit;
* **resumes after kill -9**: Optuna's TPE sampler and median pruner, with the study in the project's
  SQLite store (``--db``, the bench store by default; the path is taken literally); a rerun of the same
  command continues until ``trials`` trials have finished. Each trial's sampling is seeded by the
  seed and the trial's number (:func:`sampler`), which the store hands out once per study: a rerun,
  or a second process on the same study, draws new points instead of repeating the first ones, and
  a trial whose point another trial already holds (finished, or running elsewhere) is skipped
  (pruned, ``duplicate_of``) instead of evaluated twice;
* writes the best hyperparameters as a preset file (:mod:`unlearnkit.methods.tuned`) that ``run`` and
  ``bench`` take as ``--preset`` / ``preset:``.

What is searched is each method's own ``SEARCH_SPACE`` (declared in its file).
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from . import validate
from .audit import AuditConfig, audit
from .checkpoints import file_lock
from .config import RunConfig
from .data.arrays import ArrayData
from .errors import NonFiniteLossError, UserError, WriteFailed
from .evaluation import model_outputs, output_metrics
from .methods import METHODS
from .methods.base import Search
from .metrics.summary import gap

SEPARABILITY_WEIGHT = 10.0  # objective points per unit of separability ratio above retrain's (1.0)
GAP_KEYS = {"ua": "forget_acc", "ra": "retain_acc", "ta": "test_acc", "mia": "mia_efficacy"}
#: the audit inside a trial: lighter than `unlearnkit audit` (5 probe resplits), no IDI
TRIAL_AUDIT = {"n_splits": 5}


def validation_split(split):
    """``split`` with its validation part in the test set's place (test, test_forget, test_retain), so
    nothing downstream reads the test set. Rows are re-indexed 0..n-1 within the validation part."""
    v = split.val
    val = ArrayData(v.x, v.y, v.mean, v.std, torch.arange(len(v)), dict(v.aux))
    classes = list(split.forgotten_classes)
    is_f = torch.isin(val.y, torch.tensor(classes, dtype=val.y.dtype)) if classes else torch.zeros(len(val), dtype=bool)
    return replace(split, test=val, test_forget=val.subset(torch.nonzero(is_f).flatten()),
                   test_retain=val.subset(torch.nonzero(~is_f).flatten()))


def sample(trial, space: dict[str, Search]) -> dict:
    """One point of ``space`` drawn by an Optuna trial."""
    out = {}
    for name, s in space.items():
        if s.kind == "log":
            out[name] = trial.suggest_float(name, s.low, s.high, log=True)
        elif s.kind == "float":
            out[name] = trial.suggest_float(name, s.low, s.high)
        elif s.kind == "int":
            out[name] = trial.suggest_int(name, int(s.low), int(s.high))
        else:
            out[name] = trial.suggest_categorical(name, list(s.values))
    return out


@dataclass
class Task:
    """What a search runs on: the split, the original and retrained models, retrain's numbers."""

    cfg: RunConfig
    split: object            # the real split (methods train on its train parts)
    val_split: object        # validation in the test set's place
    original: torch.nn.Module
    retrained: torch.nn.Module
    reference: dict          # retrain's output metrics on val_split
    device: torch.device


def prepare_task(cfg: RunConfig, progress: bool = True) -> Task:
    """The data, the split, the original and the retrained model (cached, as ``run`` trains them) and
    retrain's numbers on the validation split."""
    from .runner import prepare, train_references

    exp = prepare(replace(cfg, audit=False), progress)
    refs = train_references(exp)
    val_split = validation_split(exp.split)
    reference = output_metrics(model_outputs(refs.retrain.model, val_split, (), exp.device), val_split)
    return Task(exp.cfg, exp.split, val_split, refs.original.model, refs.retrain.model, reference, exp.device)


def trial_score(task: Task, method_name: str, preset: str, params: dict, report=None) -> dict:
    """Run the method with ``params`` and score it (module docstring). ``report(value)`` is called with
    the output Gap before the audit and returns True when the trial should stop there (pruned)."""
    method = METHODS.get(method_name).from_preset(preset, task.cfg.dataset, **params)
    t0 = time.perf_counter()
    result = method.unlearn(task.original, task.split, original=task.original, device=task.device,
                            seed=task.cfg.seed)
    m = output_metrics(model_outputs(result.model, task.val_split, (), task.device), task.val_split)
    g = gap({k: m[v] for k, v in GAP_KEYS.items()}, {k: task.reference[v] for k, v in GAP_KEYS.items()})
    out = {"gap": g, "runtime_s": time.perf_counter() - t0, **{k: m[k] for k in GAP_KEYS.values()}}
    if not math.isfinite(g) or (report is not None and report(g)):
        return {**out, "pruned": True}
    rep = audit(task.original, result.model, task.retrained, task.val_split, config=AuditConfig(**TRIAL_AUDIT),
                device=task.device)
    ratio = rep.layer(rep.penultimate).separability_ratio
    sep = ratio.value if ratio is not None and math.isfinite(ratio.value) else math.nan
    penalty = SEPARABILITY_WEIGHT * max(0.0, sep - 1.0) if math.isfinite(sep) else 0.0
    return {**out, "separability_ratio": sep, "verdict": rep.verdict, "objective": g + penalty, "pruned": False}


def forget_text(cfg: RunConfig) -> str:
    """The forget set in words: ``classes 3``, ``random 0.1``, ``flipped 0.05``, ``indices FILE``."""
    if cfg.forget_classes:
        return f"classes {','.join(map(str, cfg.forget_classes))}"
    if cfg.forget_flipped is not None:
        return f"flipped {cfg.forget_flipped}"
    return f"random {cfg.forget_random}" if cfg.forget_random is not None else f"indices {cfg.forget_indices}"


def study_name(cfg: RunConfig, method: str, preset: str) -> str:
    return (f"tune/{method}/{cfg.dataset}/{cfg.model}/{forget_text(cfg)}/seed {cfg.seed}/data seed {cfg.data_seed}/"
            f"{preset}")


SQLITE_HEADER = b"SQLite format 3\x00"


def check_store(db: Path) -> Path:
    """``db`` as a store for the study: a file that is absent, empty or a SQLite database (its first 16
    bytes say so); anything else is a UserError, before any work. Returns ``db``."""
    if db.is_file() and db.stat().st_size > 0:
        try:
            with open(db, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except OSError as e:
            raise UserError(f"--db {db} cannot be read ({e.strerror})") from None
        if head != SQLITE_HEADER:
            raise UserError(f"--db {db} is not a SQLite database; give the results store (or a new file)")
    return db


def storage_url(db: Path) -> str:
    """The SQLAlchemy URL of the SQLite file ``db``, its path taken literally (``a?b.db``, ``#``, ``%``,
    spaces): an SQLite URI filename (``file:`` and the percent-quoted absolute path, ``uri=true``) that
    SQLAlchemy renders, quoting it once more for its own parsing."""
    from urllib.parse import quote

    from sqlalchemy.engine import URL

    url = URL.create("sqlite", database="file:" + quote(str(Path(db).resolve())), query={"uri": "true"})
    return url.render_as_string(hide_password=False)


def require_optuna():
    """Optuna, or one UserError saying how to install it (it is the ``tune`` extra, not a dependency of the
    library: ``pip install -e .`` does not bring it)."""
    try:
        import optuna
    except ImportError:
        raise UserError("unlearnkit tune needs Optuna, which is not installed: pip install 'unlearnkit[tune]' (or "
                        "pip install optuna)") from None
    return optuna


def storage(db: Path):
    """Optuna's SQLite storage in the project's store (a heartbeat marks trials of a killed run failed).

    Made under a lock beside the store (:func:`unlearnkit.checkpoints.file_lock`, ``<db>.tune.lock``): two
    ``tune`` processes starting on a new store would both create Optuna's tables, and one died on
    ``UNIQUE constraint failed: alembic_version.version_num``; the second now waits the moment the first
    takes to create them, then opens them. A store whose tables belong to another program (a ``studies``
    table of other columns) is one UserError naming ``--db``."""
    optuna = require_optuna()

    check_store(db)
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise WriteFailed(e.errno, e.strerror, str(db.parent)) from None
    with file_lock(db.with_name(db.name + ".tune.lock")), warnings.catch_warnings():
        # heartbeats are "experimental" in Optuna; they are what makes resuming work
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        with _study_errors(db):
            return optuna.storages.RDBStorage(storage_url(db), engine_kwargs={"connect_args": {"timeout": 60}},
                                              heartbeat_interval=30, grace_period=90)


@contextlib.contextmanager
def _study_errors(db: Path):
    """Optuna's and SQLAlchemy's errors about the file itself as one UserError naming ``--db`` (another
    program's tables, a locked or read-only file); a full disk stays what it is (the CLI says it)."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (SQLAlchemyError, optuna.exceptions.StorageInternalError) as e:
        cause = e if isinstance(e, SQLAlchemyError) else (e.__cause__ or e.__context__ or e)
        detail = " ".join(str(getattr(cause, "orig", cause)).split())
        if any(t in detail.lower() for t in ("disk is full", "readonly database")):
            raise
        raise UserError(f"--db {db} cannot hold the study ({detail[:160]}): it holds tables of another program? "
                        f"give the results store (results/unlearnkit.db) or a new file") from None


def create_study(db: Path, name: str, seed: int):
    """The study ``name`` in the store ``db`` (created, or loaded when it exists), under the lock of
    :func:`storage`; trials a killed process left ``RUNNING`` are marked failed (:func:`fail_orphans`)."""
    optuna = require_optuna()
    st = storage(db)
    with file_lock(db.with_name(db.name + ".tune.lock")), _study_errors(db):
        study = optuna.create_study(study_name=name, storage=st, direction="minimize", sampler=sampler(seed),
                                    pruner=optuna.pruners.MedianPruner(n_startup_trials=5), load_if_exists=True)
        fail_orphans(study)
    return study


#: the user attributes that say which process runs a trial (set when it starts)
OWNER_KEYS = ("host", "pid", "pid_started")


def owner() -> dict:
    """This process, as a trial records it: the host, the pid and when the pid started (a pid is reused)."""
    import socket

    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_started": _started(os.getpid())}


def _started(pid: int) -> str | None:
    """When process ``pid`` started (its start time in clock ticks since boot, from /proc), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(attrs: dict) -> bool:
    """Whether the process a trial's attributes name still runs (True when it cannot tell: another host, no
    record: those trials are left to Optuna's heartbeat)."""
    import socket

    if attrs.get("host") != socket.gethostname() or not isinstance(attrs.get("pid"), int):
        return True
    started = _started(attrs["pid"])
    return started is not None and (attrs.get("pid_started") is None or started == attrs["pid_started"])


def fail_orphans(study) -> list[int]:
    """Mark failed every trial of ``study`` still ``RUNNING`` whose process is gone (killed with ``kill -9``:
    it never finished its trial); returns their numbers. A trial of this host records its process
    (:func:`owner`), so a resumed ``tune`` frees its orphans at once; a trial another host runs is left to
    Optuna's heartbeat (stale after its grace period of 90 s)."""
    import optuna

    gone = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        attrs = t.system_attrs.get("unlearnkit_owner") or {}
        if not _alive(attrs):
            study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
            gone.append(t.number)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)  # other hosts' trials past the heartbeat's grace period
    return gone


def trial_seed(seed: int, number: int) -> int:
    """The seed of trial ``number``'s sampling: a hash of the search's ``seed`` and the trial's number."""
    return int.from_bytes(hashlib.sha256(f"unlearnkit tune/{seed}/{number}".encode()).digest()[:4], "little")


def sampler(seed: int):
    """Optuna's TPE sampler, seeded afresh for each trial with :func:`trial_seed` (``seed``, its number).

    One sampler seeded once would draw the same points again in every process that starts it: a rerun
    after kill -9 repeated its first trials, two processes on one study evaluated every point twice.
    A trial's number is unique in its study (the store gives it), so each trial draws its own points,
    and the same study run again from scratch draws the same ones (reproducible)."""
    import optuna

    class PerTrialTPE(optuna.samplers.BaseSampler):
        def __init__(self) -> None:
            self.inner = optuna.samplers.TPESampler(seed=seed)

        def before_trial(self, study, trial) -> None:
            self.inner = optuna.samplers.TPESampler(seed=trial_seed(seed, trial.number))
            self.inner.before_trial(study, trial)

        def infer_relative_search_space(self, study, trial):
            return self.inner.infer_relative_search_space(study, trial)

        def sample_relative(self, study, trial, search_space):
            return self.inner.sample_relative(study, trial, search_space)

        def sample_independent(self, study, trial, param_name, param_distribution):
            return self.inner.sample_independent(study, trial, param_name, param_distribution)

        def after_trial(self, study, trial, state, values) -> None:
            self.inner.after_trial(study, trial, state, values)

        def reseed_rng(self) -> None:
            self.inner.reseed_rng()

    return PerTrialTPE()


def same_point(study, trial, params: dict) -> int | None:
    """The number of another trial of ``study`` at ``params`` (finished, pruned, or running in another
    process), or None."""
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.RUNNING)
    for t in study.get_trials(deepcopy=False, states=states):
        if t.number != trial.number and t.params == params:
            return t.number
    return None


def finished(study) -> int:
    import optuna

    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return sum(t.state in done for t in study.trials)


def check_method(name: str) -> str:
    """The canonical name of a method that can be tuned (it declares a ``SEARCH_SPACE``)."""
    from .methods.names import method_names

    (canonical,) = method_names([name], "standard")
    cls = METHODS.get(canonical)
    if cls.is_reference or not cls.SEARCH_SPACE:
        tunable = sorted(n for n in METHODS.names() if METHODS.get(n).SEARCH_SPACE)
        raise UserError(f"{canonical} declares no SEARCH_SPACE to tune; these do: {', '.join(tunable)}")
    return canonical


def objective_for(task: Task, method: str, preset: str):
    """The Optuna objective: the trial's score; its numbers are kept as the trial's user attributes."""
    import optuna

    def objective(trial) -> float:
        trial.storage.set_trial_system_attr(trial._trial_id, "unlearnkit_owner", owner())  # fail_orphans reads it
        params = sample(trial, METHODS.get(method).SEARCH_SPACE)
        twin = same_point(trial.study, trial, params)
        if twin is not None:  # never evaluate a point twice (a rerun, another process on the study)
            trial.set_user_attr("duplicate_of", twin)
            raise optuna.TrialPruned(f"the same point as trial {twin}")

        def report(value: float) -> bool:
            trial.report(value, 0)
            return trial.should_prune()

        try:
            score = trial_score(task, method, preset, params, report)
        except NonFiniteLossError as e:
            trial.set_user_attr("error", str(e))
            raise optuna.TrialPruned(str(e)) from None
        for k, v in score.items():
            trial.set_user_attr(k, v if not isinstance(v, float) or math.isfinite(v) else None)
        if score["pruned"]:
            raise optuna.TrialPruned(f"output Gap {score['gap']:.2f} worse than the median")
        return score["objective"]

    return objective


def tuned_on(cfg: RunConfig, study, trials: int) -> dict:
    best = study.best_trial
    return validate.finite_or_none({
        "dataset": cfg.dataset, "model": cfg.model, "forget": forget_text(cfg), "seed": cfg.seed,
        "data_seed": cfg.data_seed, "split": "val (never the test set)", "study": study.study_name,
        "trials": trials, "best_trial": best.number, "objective": best.value,
        "objective_definition": f"Gap to retrain (points) + {SEPARABILITY_WEIGHT:g} x max(0, separability ratio - 1)",
        "gap": best.user_attrs.get("gap"), "separability_ratio": best.user_attrs.get("separability_ratio"),
        "verdict_on_val": best.user_attrs.get("verdict")})
