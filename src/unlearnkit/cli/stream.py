"""``unlearnkit stream``: deletion requests applied one after another to one model, audited after each.

Its options are ``run``'s (the same definitions, read from :func:`.run.run_command`'s signature, so
the two cannot drift apart) less those that say what to forget, plus ``--requests`` and ``--fallback``.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Optional  # noqa: F401 (run's option annotations are evaluated in this module)

import typer

from .options import runtime_options
from .run import RUNTIME_KEYS, _overrides, run_command

#: run's options a stream does not take: its requests say what to forget (standard setting only)
NOT_IN_STREAM = ("forget_classes", "forget_random", "forget_indices", "forget_flipped", "task", "concept",
                 "setting", "parties")
STREAM_DEFAULT_OUT = "runs/stream"


def stream_command(*, requests: Path, fallback: str, **options):
    """Apply a stream of deletion requests (a YAML list: classes, random, indices) to one model, in order;
    after each, audit every method against references retrained without everything deleted so far.

    Each finished step is stored in --out: run the same command again to resume.
    """
    from .. import validate
    from ..config import load_config
    from ..stream import FALLBACKS, read_requests, run_stream

    validate.choice("--fallback", fallback, FALLBACKS)
    reqs = read_requests(requests)  # the file's structure now; against the data before any training
    given = {k: v for k, v in options.items() if k not in RUNTIME_KEYS and k not in ("config", "progress")}
    cfg = load_config(options["config"], _overrides({**given, **{k: None for k in NOT_IN_STREAM}}))
    if options["out"] is None and options["config"] is None:
        cfg.out = STREAM_DEFAULT_OUT
    runtime = runtime_options(*(options[k] for k in RUNTIME_KEYS))
    if runtime:
        cfg.runtime = {**cfg.runtime, **runtime}
    results = run_stream(cfg, reqs, fallback=fallback, progress=options["progress"],
                         where=f"--requests {requests}")
    _print(results.results)
    typer.echo(f"wrote {Path(cfg.out) / 'results.json'} and results.md")


def _print(results: dict) -> None:
    """The steps as a table at most 100 columns wide: method, step, verdict and accuracies first; the request
    text, Gap, separability, times, the fallback and resurfacing in a second part when they do not fit."""
    from ..progress import print_table
    from ..stream import step_table

    header, rows = step_table(results)
    first = ["method", "step", "verdict", "forget acc", "retain acc", "test acc"]
    order = [header.index(h) for h in first] + [i for i, h in enumerate(header) if h not in first]
    print_table(f"stream: {results['task']['dataset']} / {results['task']['model']}", header, rows,
                right=set(range(4, 10)), wrap={header.index("request"), header.index("verdict")}, order=order)


def _signature() -> inspect.Signature:
    """``--requests`` and ``--fallback``, then ``run``'s options less :data:`NOT_IN_STREAM`."""
    own = [inspect.Parameter("requests", inspect.Parameter.KEYWORD_ONLY, annotation="Path",
                             default=typer.Option(..., help="YAML list of requests, applied in order: "
                                                  "{classes: [3]}, {random: 0.05} (of what remains), "
                                                  "{indices: [..] or a file} (training indices)")),
           inspect.Parameter("fallback", inspect.Parameter.KEYWORD_ONLY, annotation="str",
                             default=typer.Option("none", help="none | retrain: replace the model by the retrain "
                                                  "whenever a step's verdict is not erased"))]
    shared = [p for name, p in inspect.signature(run_command).parameters.items() if name not in NOT_IN_STREAM]
    return inspect.Signature(own + shared)


stream_command.__signature__ = _signature()
stream_command.__annotations__ = {p.name: p.annotation for p in stream_command.__signature__.parameters.values()}
