"""Preset files: hyperparameters found by ``unlearnkit tune``, read back by ``run`` and ``bench``.

A preset file is YAML (read by :func:`unlearnkit.validate.yaml_file`: plain data, no code runs)::

    unlearnkit_preset: 1
    base: reference                       # the preset the tuned values apply over
    method_params:
      ssd: {selection_weighting: 2.41, dampening_constant: 0.83}
    tuned_on: {dataset: digits, model: small_cnn, forget: classes 3, split: val, ...}   # provenance

``--preset tuned.yaml`` (``run``) or ``preset: tuned.yaml`` (a run config, a bench suite) means: the
``base`` preset, with the file's hyperparameters for the methods it names; hyperparameters given
explicitly (``method_params``) win over the file's. Methods the file does not name run with ``base``.
"""
from __future__ import annotations

from pathlib import Path

from .. import validate
from ..errors import UserError

FORMAT = 1
SUFFIXES = (".yaml", ".yml")
BASES = ("auto", "small", "reference")


def is_preset_file(preset) -> bool:
    return isinstance(preset, str) and preset.lower().endswith(SUFFIXES)


def read_preset_file(path: str | Path) -> dict:
    """The file's ``{"base": str, "method_params": {method: {key: value}}, "tuned_on": dict}``, checked."""
    p, data = validate.yaml_file("preset file", path)
    if not isinstance(data, dict) or data.get("unlearnkit_preset") != FORMAT:
        raise UserError(f"{p} is not an unlearnkit preset file (it needs unlearnkit_preset: {FORMAT}; "
                        f"unlearnkit tune writes one)")
    base = validate.choice(f"base in {p}", data.get("base", "reference"), BASES)
    params = validate.mapping(f"method_params in {p}", data.get("method_params") or {})
    for name, values in params.items():
        validate.mapping(f"method_params.{name} in {p}", values)
    return {"base": base, "method_params": params, "tuned_on": data.get("tuned_on") or {}}


def apply_preset_file(path: str, methods: list[str], given: dict, canonical) -> tuple[str, dict]:
    """``(base preset, method_params)`` for a run of ``methods``: the file's values for those methods
    under the ``given`` ones (``canonical(name)`` maps a name or alias to the registry's name)."""
    found = read_preset_file(path)
    run = {canonical(m) for m in methods}
    merged: dict = {}
    for name, values in found["method_params"].items():
        c = canonical(str(name))
        if c in run:
            merged[c] = dict(values)
    for name, values in given.items():
        c = canonical(str(name))
        merged[c] = {**merged.get(c, {}), **dict(values)}
    return found["base"], merged


def preset_file_text(base: str, method: str, params: dict, tuned_on: dict) -> str:
    """The YAML text of a preset file holding ``params`` for ``method``."""
    import yaml

    header = (f"# unlearnkit preset: {method}'s hyperparameters found by `unlearnkit tune` on the validation split.\n"
              f"# Use it with `unlearnkit run --preset THIS_FILE` or `preset: THIS_FILE` in a bench suite.\n")
    body = {"unlearnkit_preset": FORMAT, "base": base, "method_params": {method: params}, "tuned_on": tuned_on}
    return header + yaml.safe_dump(body, sort_keys=False)
