"""IDI in the audit: InfoNCE critics on each layer of each model (Jeon et al., reference-specs §2.6).

For a model theta and an audit layer l, the critic f_nu is a trainable copy of theta's layers
after l plus a projection head, and g_eta two trainable label vectors; it is trained to tell forget
from retained samples from Z_l (theta's frozen layer-l features), and I_theta(Z_l; Y) is the
two-label InfoNCE bound of :func:`unlearnkit.metrics.idi.infonce_mi`. Then IDI = ID(unlearned) /
ID(original) (:func:`unlearnkit.metrics.idi.idi`).

How the critic is built, for any model with named audit layers (no reference code exists, so
these are INFERRED, documented choices):

* the copy is initialised from theta and runs in ``eval()`` mode (BatchNorm after l keeps theta's
  running statistics while its affine parameters train; no dropout). Z_l is computed once per
  trial with theta (unpooled), and the critic is theta's graph cut at l (torch.fx: the layers after
  l up to the classifier head's input); for the ``penultimate`` layer nothing trains but the
  projection head. Where the forward cannot be traced, the whole copy runs on the input with
  layer l's output detached by a forward hook (same numbers, more compute). The critic's
  representation is the head's input; projection head Linear(d, 128)-ReLU-Linear(128, 128);
  scores f(z)^T g_y.
* data: the training split's forget samples and an equal number of retained ones (at most
  ``idi_max_per_side`` a side), 70 % to train the critic and 30 % held out. The bound is evaluated
  on the held-out part: a critic as flexible as the rest of the network could memorise its
  training samples and push every model to log 2. Negative held-out estimates are clipped to 0.
* SGD (the paper: "trained with SGD"; lr ``idi_lr``, momentum 0.9, weight decay 5e-4), batch 128,
  ``idi_steps`` steps, averaged over ``idi_trials`` trials (the paper: 5) with different critic
  initialisations, shuffles and held-out draws. Measured on digits (class 3, small_cnn, 3 trials):
  with 20 steps the critic is undertrained (retrain's MI 0.19-0.26 nats, a retrain of another seed
  scored IDI -0.25); with 120 steps the original saturates near log 2, retrain reads 0.53-0.66 and
  the other retrain seed IDI +0.009, the masked-output original exactly 1.0; lr 0.05 diverged.

The original's and the references' estimates depend only on them, so an :class:`AuditCache`
computes them once per run.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..metrics.idi import LOG2, idi, infonce_mi, information_difference
from ..models.features import capture
from ..models.zoo import head_of, taps_of
from .config import AuditConfig
from .context import AuditContext

PROJ_DIM = 128


class _LeafTracer(torch.fx.Tracer):
    """Traces the model's forward keeping the tap's module and the classifier head as single calls."""

    def __init__(self, leaves: set[str]):
        super().__init__()
        self.leaves = leaves

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return qualname in self.leaves or super().is_leaf_module(m, qualname)


def rest_of(model: nn.Module, layer: str) -> nn.Module | None:
    """A module computing the classifier head's input from ``layer``'s output: the model's layers after
    ``layer`` (a torch.fx graph cut at the tap; parameters shared with ``model``). None when the forward
    cannot be traced symbolically or the tap is not a single module call (the critic then runs the
    whole copy)."""
    tap = taps_of(model)[layer]
    head = model.unlearnkit_head
    if tap.at != "output":
        return None
    try:
        gm = torch.fx.GraphModule(model, _LeafTracer({tap.module, head}).trace(model))
    except Exception:  # noqa: BLE001 - any tracing failure means: use the full copy
        return None
    graph = gm.graph
    calls = [n for n in graph.nodes if n.op == "call_module" and n.target == tap.module]
    heads = [n for n in graph.nodes if n.op == "call_module" and n.target == head]
    if len(calls) != 1 or len(heads) != 1 or not heads[0].args:
        return None
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    with graph.inserting_before(inputs[0]):
        z = graph.placeholder("z_layer")
    calls[0].replace_all_uses_with(z)
    out = next(n for n in graph.nodes if n.op == "output")
    out.args = (heads[0].args[0],)
    graph.eliminate_dead_code()
    for n in inputs:
        if not n.users:
            graph.erase_node(n)
    if [n for n in graph.nodes if n.op == "placeholder"] != [z]:
        return None  # the rest still needs the raw input (e.g. a skip connection from it)
    graph.lint()
    gm.recompile()
    gm.delete_all_unused_submodules()
    return gm


class _Critic(nn.Module):
    """The layers after ``layer`` (trainable, initialised from the model), a projection head and two
    label vectors. ``mode``: ``"vector"`` (the layer is the head's input: only the projection head
    trains), ``"rest"`` (a traced cut of the model from the layer's output: it reads layer features
    computed once), ``"copy"`` (the whole copy runs on the input with the layer's output detached)."""

    def __init__(self, model: nn.Module, layer: str, gen: torch.Generator):
        super().__init__()
        body = copy.deepcopy(model).eval()
        tap = taps_of(body)[layer]
        head = head_of(body)
        self._feat: dict[str, torch.Tensor] = {}
        self._handles = []
        if tap.at != "output":
            self.mode, self.body = "vector", None
        else:
            rest = rest_of(body, layer)
            if rest is not None:
                self.mode, self.body = "rest", rest.eval()
            else:
                self.mode, self.body = "copy", body
                self._handles.append(head.register_forward_pre_hook(
                    lambda m, args: self._feat.__setitem__("z", args[0])))
                self._handles.append(body.get_submodule(tap.module).register_forward_hook(
                    lambda m, args, out: out.detach()))
        d = head.in_features if hasattr(head, "in_features") else None
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.proj = nn.LazyLinear(PROJ_DIM) if d is None else nn.Linear(d, PROJ_DIM)
            self.proj2 = nn.Linear(PROJ_DIM, PROJ_DIM)
            self.g = nn.Parameter(torch.randn(2, PROJ_DIM) * 0.01)

    def represent(self, inp: torch.Tensor) -> torch.Tensor:
        """The head's input: from the layer's features (``vector`` / ``rest``) or the raw input (``copy``)."""
        if self.mode == "vector":
            return inp.flatten(1)
        if self.mode == "rest":
            return self.body(inp).flatten(1)
        self.body(inp)
        return self._feat.pop("z").flatten(1)

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        return self.proj2(F.relu(self.proj(self.represent(inp)))) @ self.g.T

    def remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()


def _balanced_rows(n_f: int, n_r: int, cap: int, rng: np.random.RandomState) -> tuple[np.ndarray, np.ndarray]:
    n = min(n_f, n_r, cap)
    return np.sort(rng.choice(n_f, n, replace=False)), np.sort(rng.choice(n_r, n, replace=False))


def _data(split, config: AuditConfig, trial: int):
    """(x, y) training and held-out tensors for one trial: balanced forget vs retained rows."""
    rng = np.random.RandomState(config.probe_seed + 1000 + trial)
    f_rows, r_rows = _balanced_rows(len(split.train_forget), len(split.train_retain), config.idi_max_per_side, rng)
    forget = split.train_forget.subset(torch.from_numpy(f_rows))
    retain = split.train_retain.subset(torch.from_numpy(r_rows))
    x = torch.cat([forget.normalize(forget.x), retain.normalize(retain.x)])
    y = torch.cat([torch.ones(len(f_rows), dtype=torch.long), torch.zeros(len(r_rows), dtype=torch.long)])
    held = np.zeros(len(y), dtype=bool)
    for side in (np.flatnonzero(y.numpy() == 1), np.flatnonzero(y.numpy() == 0)):
        held[rng.choice(side, max(1, int(round(0.3 * side.size))), replace=False)] = True
    held_t = torch.from_numpy(held)
    return x[~held_t], y[~held_t], x[held_t], y[held_t]


@torch.no_grad()
def _layer_inputs(model: nn.Module, layers: list[str], x: torch.Tensor, device) -> dict[str, torch.Tensor]:
    """Every layer's unpooled output (the head's input for ``at="input"`` taps) on ``x``, one pass (CPU)."""
    model.eval()
    parts: dict[str, list[torch.Tensor]] = {layer: [] for layer in layers}
    with capture(model, layers, pooled=False) as f:
        for s in range(0, len(x), 256):
            model(x[s:s + 256].to(device))
            for layer in layers:
                parts[layer].append(f[layer].cpu())
    return {layer: torch.cat(v) for layer, v in parts.items()}


def critic_mi(model: nn.Module, layer: str, data, config: AuditConfig, trial: int, *, device,
              feats: tuple[dict, dict] | None = None) -> float:
    """One trial's held-out InfoNCE estimate of I(Z_layer; Y) for ``model`` (nats, clipped at 0).

    ``feats``: the layer outputs of ``model`` on the trial's training / held-out rows
    (:func:`_layer_inputs`), used unless the critic has to run the whole copy."""
    x_tr, y_tr, x_te, y_te = data
    gen = torch.Generator().manual_seed(config.probe_seed + 7919 * trial)
    critic = _Critic(model, layer, gen).to(device)
    if critic.mode != "copy":
        if feats is None:
            feats = tuple(_layer_inputs(model, [layer], x, device) for x in (x_tr, x_te))
        x_tr, x_te = feats[0][layer], feats[1][layer]
    try:
        if critic.body is not None:
            for p in critic.body.parameters():
                p.requires_grad_(True)
        with torch.enable_grad():
            if critic.mode == "copy":
                # one backward to find the parameters upstream of the detached layer: freeze them, so later
                # forwards build no graph through them
                critic(x_tr[:2].to(device)).sum().backward()
                for p in critic.body.parameters():
                    if p.grad is None:
                        p.requires_grad_(False)
            critic.zero_grad(set_to_none=True)
            params = [p for p in critic.parameters() if p.requires_grad]
            opt = torch.optim.SGD(params, lr=config.idi_lr, momentum=0.9, weight_decay=5e-4)
            n, step = len(y_tr), 0
            while step < config.idi_steps:
                order = torch.randperm(n, generator=gen)
                for s in range(0, n, config.idi_batch_size):
                    idx = order[s:s + config.idi_batch_size]
                    loss = F.cross_entropy(critic(x_tr[idx].to(device)), y_tr[idx].to(device))
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    step += 1
                    if step == config.idi_steps:
                        break
        with torch.no_grad():
            scores = torch.cat([critic(x_te[s:s + 512].to(device)).cpu() for s in range(0, len(y_te), 512)])
        mi = infonce_mi(scores, y_te)
    finally:
        critic.remove_hooks()
    return max(0.0, mi) if math.isfinite(mi) else 0.0


def model_mi(model: nn.Module, layers: list[str], split, config: AuditConfig, device) -> dict:
    """{layer: {"mean", "std", "trials"}} of the held-out InfoNCE estimate over ``idi_trials``."""
    datas = [_data(split, config, t) for t in range(config.idi_trials)]
    feats = [tuple(_layer_inputs(model, layers, x, device) for x in (d[0], d[2])) for d in datas]
    out = {}
    for layer in layers:
        vals = [critic_mi(model, layer, datas[t], config, t, device=device, feats=feats[t])
                for t in range(config.idi_trials)]
        out[layer] = {"mean": float(np.mean(vals)), "std": float(np.std(vals)), "trials": vals}
    return out


def idi_check(original: nn.Module, unlearned: nn.Module, refs: list[nn.Module], layers: list[str],
              ctx: AuditContext) -> dict:
    """The audit's ``idi`` entry: IDI, both IDs, and every model's per-layer MI estimates on ``ctx.split``.
    The original's and the references' estimates come from the run's cache when an earlier audit of the
    run computed them."""
    split, config, device = ctx.split, ctx.config, ctx.device
    n_side = min(len(split.train_forget), len(split.train_retain), config.idi_max_per_side)
    if n_side < 10:
        return {"idi": None, "note": f"only {n_side} forget samples: too few to train an InfoNCE critic"}

    def cached(model: nn.Module, role: str) -> dict:
        return ctx.cached(model, ("idi", role), lambda: model_mi(model, layers, split, config, device))

    mi_u = model_mi(unlearned, layers, split, config, device)
    mi_o = cached(original, "original")
    mi_refs = [cached(r, "retrained") for r in refs]
    mean = lambda d: [d[layer]["mean"] for layer in layers]  # noqa: E731
    mi_r = list(np.mean([mean(m) for m in mi_refs], axis=0))
    value = idi(mean(mi_u), mean(mi_o), mi_r, clip=config.idi_clip)
    id_u = information_difference(mean(mi_u), mi_r, config.idi_clip)
    id_o = information_difference(mean(mi_o), mi_r, config.idi_clip)
    note = (f"InfoNCE critics on {n_side} forget + {n_side} retained training samples (30 % held out), "
            f"{config.idi_trials} trial(s) of {config.idi_steps} SGD steps per layer; MI in nats (max log 2 = "
            f"{LOG2:.3f}); {'clipped' if config.idi_clip else 'signed'} per-layer differences")
    if not math.isfinite(value):
        note += (f"; undefined: the original carries no more information about the forget labels than "
                 f"retrain (ID(original) = {id_o:+.4f} nats)")
    return {"idi": value if math.isfinite(value) else None, "id_unlearned": id_u, "id_original": id_o,
            "clip": config.idi_clip, "layers": list(layers), "n_per_side": n_side,
            "mi": {"unlearned": mi_u, "original": mi_o, "retrained": {layer: float(v) for layer, v in
                                                                      zip(layers, mi_r)}},
            "note": note}
