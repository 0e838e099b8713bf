"""A canonical parametrisation of ReLU chain networks, so that weight-space attacks (few-shot SGD
relearning) read the function, not the parametrisation.

INFERRED: there is no reference code. Issue 28 (Deliver 3) asks to "canonicalise a copy of the model
before few-shot SGD relearning (for ReLU networks, unit-norm incoming weights per unit with the scale
pushed to the next layer; weights that feed a BatchNorm normalised), so positive rescaling and
permutation cannot change the result". :func:`canonicalize` does that for a chain of ``nn.Linear`` /
``nn.Conv2d`` (groups=1) layers, each optionally followed by an eval-mode ``BatchNorm1d/2d``, with
only ReLU / LeakyReLU, max / average pooling, flatten, dropout and identity between them (found with
``torch.fx.symbolic_trace``). Per hidden unit, in forward order:

* without BatchNorm: the unit's incoming (weights, bias) is divided by its L2 norm and the next
  layer's input column (or, after a flatten, its block of H*W columns) multiplied by it;
* with BatchNorm: the conv/linear row is divided by its norm ``r``, and the eval-mode BatchNorm,
  which is a per-channel affine map, is rewritten exactly as ``gamma' * z + beta'`` (running mean 0,
  running variance ``1 - eps``; ``gamma' = gamma r / sqrt(var + eps)``, ``beta' = beta + gamma (bias -
  mean) / sqrt(var + eps)``, the layer's bias folded in and set to 0); then (gamma', beta') is
  normalised to unit norm and its scale pushed to the next layer. Folding the statistics in (rather
  than rescaling them by r and r^2) stays exact whatever ``eps`` and also removes mean/beta shifts;
* units whose incoming parameters are all zero (dead: their output is exactly 0) are left as they
  are and put last, and their outgoing columns are set to 0 (they never reach the output, and
  through a LeakyReLU they would steer SGD);
* the units are then sorted by a fixed random projection of their normalised incoming parameters
  (the previous layer is already in canonical order, so this key is permutation-invariant), and the
  next layer's inputs are permuted to match. The output layer is neither rescaled nor permuted.

The arithmetic is done in float64 on the CPU, so scales up to float32's range (2**±60 and beyond)
neither overflow nor round away. Not covered (a reason is returned): residual additions,
concatenations and other branching, attention, non-homogeneous nonlinearities (GELU, tanh, sigmoid,
softmax, PReLU, ...), grouped convolutions, BatchNorm anywhere but right after a Linear/Conv2d (or
before the first one) or without running statistics, reshapes by ``view``, untraceable models.
Units whose sort keys agree to within float rounding (e.g. exact duplicates up to rescaling) may be
ordered differently for two parametrisations of one function; invertible mixings of units other than
positive diagonal times permutation are not undone.
"""
from __future__ import annotations

import copy
import operator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import fx, nn

__all__ = ["canonicalize"]

_ACTS = (nn.ReLU, nn.LeakyReLU, nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d)
_POOLS = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)
_FN_ACTS = {F.relu, torch.relu, F.leaky_relu, F.dropout}
_FN_POOLS = {F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d, F.adaptive_max_pool2d}
_ADDS = {operator.add, operator.iadd, operator.sub, torch.add, torch.sub}
_CATS = {torch.cat, torch.stack, torch.concat}
_NOTE = "relearning on raw weights is reported, not decided"


@dataclass
class _Layer:
    weight: nn.Linear | nn.Conv2d
    bn: nn.BatchNorm1d | nn.BatchNorm2d | None = None


def canonicalize(model: nn.Module) -> tuple[nn.Module, str | None]:
    """Returns ``(copy, None)``: a deep copy of ``model`` in eval mode, float32 on the model's device,
    rewritten into the canonical parametrisation (module docstring) that computes the same logits up
    to float rounding; or ``(unchanged deep copy, reason)`` when the architecture is not a supported
    chain. ``model`` itself is never modified."""
    out = copy.deepcopy(model)
    layers, reason = _chain(out)
    if reason is not None:
        return copy.deepcopy(model), reason
    first = next(iter(out.parameters()), None)
    device = first.device if first is not None else torch.device("cpu")
    out.to("cpu", torch.float64)
    for t in [*out.parameters(), *out.buffers()]:
        t.data = t.data.contiguous()  # the in-place views below need it (e.g. channels_last weights)
    with torch.no_grad():
        for layer, nxt in zip(layers, layers[1:]):
            _canonical_layer(layer, nxt.weight)
    return out.to(device, torch.float32).eval(), None


def _where(node: fx.Node) -> str:
    """The module path nearest to ``node``: the parent of the deepest module among its inputs."""
    targets = [str(n.target) for n in node.all_input_nodes if n.op == "call_module"]
    if not targets:
        return node.name
    deepest = max(targets, key=lambda t: t.count("."))
    return deepest.rsplit(".", 1)[0] if "." in deepest else deepest


def _combining_reason(node: fx.Node) -> str:
    what = ("residual connection" if node.target in _ADDS else "concatenation" if node.target in _CATS
            else f"operation combining activations ({getattr(node.target, '__name__', node.target)})")
    return f"{what} at {_where(node)}: {_NOTE}"


def _classify(node: fx.Node, model: nn.Module) -> tuple[str, nn.Module | None] | str:
    """One chain node's kind (weight, bn, act, pool, flatten) and module, or the reason it is unsupported."""
    if node.op == "call_module":
        mod = model.get_submodule(str(node.target))
        if isinstance(mod, nn.Conv2d) and mod.groups != 1:
            return f"grouped convolution at {node.target}: {_NOTE}"
        if isinstance(mod, (nn.Linear, nn.Conv2d)):
            return "weight", mod
        if isinstance(mod, (nn.BatchNorm1d, nn.BatchNorm2d)):
            if mod.running_mean is None or not mod.affine:
                return f"BatchNorm without running statistics or affine parameters at {node.target}: {_NOTE}"
            return "bn", mod
        if isinstance(mod, nn.Flatten) and mod.start_dim == 1 and mod.end_dim == -1:
            return "flatten", None
        kind = "act" if isinstance(mod, _ACTS) else "pool" if isinstance(mod, _POOLS) else None
        if kind is None:
            return f"unsupported module at {node.target} ({type(mod).__name__}): {_NOTE}"
        return kind, None
    if node.op == "call_function" and (node.target in _FN_ACTS or node.target in _FN_POOLS):
        return ("act" if node.target in _FN_ACTS else "pool"), None
    flat = (node.op == "call_function" and node.target is torch.flatten) or (
        node.op == "call_method" and node.target == "flatten")
    if flat and list(node.args[1:]) + list(node.kwargs.values()) in ([], [1], [1, -1]):
        return "flatten", None
    if node.op == "call_method" and node.target == "relu":
        return "act", None
    return f"unsupported operation {node.name} ({getattr(node.target, '__name__', node.target)}): {_NOTE}"


def _steps(model: nn.Module) -> tuple[list[tuple[str, nn.Module | None, str]], str | None]:
    """The model's forward pass as a chain of classified steps, or the reason it is not one."""
    try:
        graph = fx.symbolic_trace(model).graph
    except Exception as e:  # noqa: BLE001 - any tracing failure means "not canonicalisable"
        return [], f"cannot trace the model with torch.fx ({type(e).__name__}: {e}): {_NOTE}"
    nodes = list(graph.nodes)
    for node in nodes:  # combining nodes first, so that a residual network is named as such
        if node.op != "output" and len(node.all_input_nodes) > 1:
            return [], _combining_reason(node)
    steps, prev, seen = [], None, set()
    for node in nodes:
        if node.op == "placeholder" and prev is None:
            prev = node
            continue
        if node.all_input_nodes != [prev] or len(prev.users) != 1:
            return [], f"not a chain of layers at {node.name} (branching or several inputs): {_NOTE}"
        if node.op == "output":
            break
        got = _classify(node, model)
        if isinstance(got, str):
            return [], got
        if got[0] in ("weight", "bn"):
            if node.target in seen:
                return [], f"module {node.target} is called more than once: {_NOTE}"
            seen.add(node.target)
        steps.append((*got, str(node.target)))
        prev = node
    return steps, None


def _chain(model: nn.Module) -> tuple[list[_Layer], str | None]:
    """The weight layers of ``model`` in forward order, with their BatchNorm and the column layout of
    the next layer, or the reason the model is not a supported chain."""
    steps, reason = _steps(model)
    if reason is not None:
        return [], reason
    layers: list[_Layer] = []
    shape, last = "input", None  # shape: units (after Linear), map (after Conv2d), flat (a flattened map)
    for kind, mod, name in steps:
        if kind == "weight":
            if layers:
                reason = _link(layers[-1], mod, shape)
                if reason is not None:
                    return [], f"{reason} at {name}: {_NOTE}"
            layers.append(_Layer(mod))
            shape = "map" if isinstance(mod, nn.Conv2d) else "units"
        elif kind == "bn" and layers:
            fits = isinstance(mod, nn.BatchNorm2d) == (shape == "map") and mod.num_features == _units(layers[-1])
            if last != "weight" or layers[-1].bn is not None or not fits:
                return [], f"BatchNorm not directly after the Linear/Conv2d it normalises at {name}: {_NOTE}"
            layers[-1].bn = mod
        elif kind == "pool" and shape not in ("map", "input"):
            return [], f"pooling over hidden units at {name}: {_NOTE}"
        elif kind == "flatten" and shape == "map":
            shape = "flat"
        last = kind
    return layers, None


def _units(layer: _Layer) -> int:
    w = layer.weight
    return w.out_channels if isinstance(w, nn.Conv2d) else w.out_features


def _link(layer: _Layer, nxt: nn.Module, shape: str) -> str | None:
    """Why ``nxt`` does not read ``layer``'s units one by one (an input channel, an input column, or
    after a flatten a block of columns per unit), or None when it does."""
    n = _units(layer)
    if isinstance(nxt, nn.Conv2d):
        ok = shape == "map" and nxt.in_channels == n
    else:
        ok = (shape == "units" and nxt.in_features == n) or (shape == "flat" and nxt.in_features % n == 0)
    return None if ok else f"{type(nxt).__name__} does not read the previous layer's units one by one"


def _canonical_layer(layer: _Layer, nxt: nn.Module) -> None:
    """Normalises, pushes forward and sorts ``layer``'s units in place (float64 modules, no grad)."""
    w, bn, n = layer.weight, layer.bn, _units(layer)
    rows = w.weight.view(n, -1)
    bias = w.bias if w.bias is not None else torch.zeros(n, dtype=rows.dtype)
    if bn is None:
        params = torch.cat([bias[:, None], rows], 1)
        scale = params.norm(dim=1)
    else:
        r = rows.norm(dim=1)
        sd = (bn.running_var + bn.eps).sqrt()
        gamma = bn.weight * r / sd
        beta = bn.bias + bn.weight * (bias - bn.running_mean) / sd
        rows.div_(torch.where(r > 0, r, 1)[:, None])
        bias.zero_()
        bn.running_mean.zero_()
        bn.running_var.fill_(1 - bn.eps)
        scale = torch.hypot(gamma, beta)
        params = torch.stack([gamma, beta], 1)
    live = scale > 0
    safe = torch.where(live, scale, 1)
    params = params / safe[:, None]
    if bn is None:
        rows.div_(safe[:, None])
        bias.div_(safe)
    else:
        bn.weight.copy_(params[:, 0])
        bn.bias.copy_(params[:, 1])
        params = torch.cat([params, rows], 1)
    cols = nxt.weight.view(nxt.weight.shape[0], n, -1)
    cols.mul_(torch.where(live, scale, 0)[None, :, None])
    key = params @ torch.randn(params.shape[1], generator=torch.Generator().manual_seed(0), dtype=params.dtype)
    order = torch.cat([torch.nonzero(m).flatten()[torch.argsort(key[m], stable=True)] for m in (live, ~live)])
    movers = [w.weight, w.bias] + ([bn.weight, bn.bias, bn.running_mean, bn.running_var] if bn is not None else [])
    for t in movers:
        if t is not None:
            t.copy_(t[order])
    cols.copy_(cols[:, order])
