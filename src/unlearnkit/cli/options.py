"""Options more than one command shares (the GPU fast path of ``train`` and ``run``)."""
from __future__ import annotations

import typer

# the GPU fast-path options (runtime.Runtime); None = not given
AMP = typer.Option(None, help="bf16: bfloat16 autocast (GPU fast path; changes the numbers, so cached apart) | off")
CHANNELS_LAST = typer.Option(None, "--channels-last/--no-channels-last", help="NHWC memory format (GPU fast path)")
COMPILE = typer.Option(None, "--compile/--no-compile", help="torch.compile the training forward")
DETERMINISTIC = typer.Option(None, "--deterministic/--no-deterministic",
                             help="deterministic GPU algorithms (reproducible, slower)")
DATA_ON_DEVICE = typer.Option(None, help="keep the images on the GPU: auto (when they fit) | always | never")


def runtime_options(amp, channels_last, compile_, deterministic, data_on_device) -> dict:
    """The runtime.Runtime fields the user set (None: not given)."""
    given = {"amp": amp, "channels_last": channels_last, "compile": compile_, "deterministic": deterministic,
             "data_on_device": data_on_device}
    return {k: v for k, v in given.items() if v is not None}
