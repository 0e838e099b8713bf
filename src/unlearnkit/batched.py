"""K models of one architecture trained together in one process, batched across the models.

Two engines, both giving each model its own minibatch in one forward and backward pass:

* :class:`Wide` (tried first): one "wide" copy of the architecture whose convolution, linear and
  BatchNorm layers hold the K models' layers side by side (grouped convolutions with ``groups=K``,
  a batched matrix product, BatchNorm over K * C channels); model k's activations are channel block k.
  Used when a trial pass gives each model's own outputs (the other operations act per channel: the
  zoo's ``small_cnn`` and ``resnet18``). On the CPU it is the fast one (see :class:`Wide`).
* :class:`Stack`: the pattern of PyTorch's "Model ensembling" tutorial (``torch.func`` docs): the
  parameters and buffers stacked along a new leading dimension (:func:`torch.func.stack_module_state`)
  and one forward pass mapped over it (:func:`torch.vmap` of :func:`torch.func.functional_call` on a
  ``meta`` copy of the module). Generic, for architectures with layers :class:`Wide` cannot widen.

**Faithful to** :func:`unlearnkit.loop.fit` (same :class:`~unlearnkit.loop.Recipe`): model ``k`` is
built by the caller after ``torch.manual_seed(seed_k)`` (the same initialisation as a sequential
training of that seed), draws its data order and augmentation from its own generator seeded with
``seed_k`` in the order ``fit`` draws them (one ``randperm`` per epoch, then each batch's crop and
flip draws), and is stepped by the recipe's optimizer: SGD (momentum, weight decay) and Adam act on
each element on its own, so one optimizer over the stacked (or widened) tensors steps each model
exactly as its own optimizer would. The loss is the sum over the models of each model's mean cross-entropy, so
each model's gradient is that of its own loss. BatchNorm computes each model's batch statistics
over that model's batch and updates its own block of the running statistics.
What differs is only the order of floating-point work (a grouped convolution sums in another order
than K plain ones): a model trained here equals the sequential one up to float rounding, which
training then amplifies over many steps as any change of kernel or thread count does; Adam amplifies
it fastest (it divides gradients near its eps by their own size: after 8 float32 steps of the small
CNN, 4e-4 apart, where float64 agrees to 1e-15), and oneDNN's grouped kernels round otherwise than its
plain ones (one digits epoch of 21 SGD steps: the wide engine's float32 weights 1e-3 from the sequential
ones, the stacked engine's 6e-7; in float64 both 3e-15: measured). ``tests/unit/test_batched_references.py`` checks
both: the weights after a few steps, and the accuracies of longer trainings against the spread of
sequential ones. The histories' ``elapsed_s`` is each model's share of the wall time (the whole / K).

Not batched (:func:`batch_support` says why in one line; the caller trains one after another):
several processes (``torchrun``: data-parallel references stay sequential), models that draw random
numbers in their forward pass (dropout: vmap cannot draw each model's masks from the global
generator in the order a sequential training would), and any architecture neither engine can run
(trial passes decide). ``torch.compile`` and ``channels_last`` are not applied here (both only reorder
floating-point work); bf16 autocast is.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state

from . import distributed
from .data.arrays import ArrayData, Augment
from .errors import NonFiniteLossError
from .loop import FitState, Recipe, lr_at, make_optimizer
from .progress import bar
from .runtime import Runtime

#: modules that draw random numbers in a training forward pass
RANDOM_MODULES = (nn.modules.dropout._DropoutNd, nn.RReLU)


def batching_pays(device) -> str | None:
    """None where training references batched is the default (a CUDA device), else why they are trained one
    after another unless batching is asked for: on this project's idle 2-core CPU (small CNNs,
    ``benchmarks/batched_references.py``, 2026-12-06, malloc tuned as the CLI tunes it) batched training
    measured 1.19-1.29x on digits (K = 8 and 16) and 0.92x on mnist5k (K = 8), and no batching could do much
    better there: one model's step on K times the rows is at best 1.8x (digits) and 0.65-0.9x (mnist5k) of K
    steps (``--ceiling-only``)."""
    kind = torch.device(device).type if device is not None else "cpu"
    if kind == "cuda":
        return None
    return (f"on the {kind} batched training measured little or no faster than one model after another "
            f"(benchmarks/batched_references.py: 1.19-1.29x on digits, 0.92x on mnist5k)")


def batch_support(model: nn.Module, example: Tensor, *, runtime: Runtime | None = None) -> str | None:
    """None when :func:`fit_batched` can train copies of ``model``, else one line saying why not.
    ``example``: a few normalised input rows (the trial passes run on deep copies, on the CPU)."""
    if distributed.world().size > 1:
        return "several processes (torchrun) train each reference data-parallel, one after another"
    random = sorted({type(m).__name__ for m in model.modules()
                     if isinstance(m, RANDOM_MODULES) and getattr(m, "p", 1.0) > 0})  # dropout of p=0 draws nothing
    if random:
        return (f"{', '.join(random)} draws random numbers in the forward pass, which vmap cannot draw per model "
                f"as sequential training does")
    if not any(p.requires_grad for p in model.parameters()):
        return "the model has no trainable parameter"
    _, why = engine_for([model, model], example, runtime=runtime)
    return why


def engine_for(models: list[nn.Module], example: Tensor, *, runtime: Runtime | None = None
               ) -> tuple[type | None, str | None]:
    """``(engine, None)``: :class:`Wide` when its trial matches the models' own forward passes, else
    :class:`Stack` when ``vmap`` runs the architecture; ``(None, why)`` when neither can."""
    copies = _distinct_copies(models[0], 2)
    x = example[:2].detach().cpu().to(torch.get_default_dtype())
    xs = torch.stack([x, x.flip(0) * 0.5])
    if Wide.check(copies, xs) is None:
        return Wide, None
    try:
        stack = Stack.of([copy.deepcopy(m) for m in copies])
        with (runtime or Runtime()).autocast(torch.device("cpu")):
            out = stack.forward(xs)
        out.float().sum().backward()
    except Exception as e:  # noqa: BLE001 - whatever vmap cannot run, the sequential loop can
        first = (str(e).strip().splitlines() or [""])[0][:160]
        return None, f"vmap cannot run this architecture ({type(e).__name__}: {first})"
    return Stack, None


def _distinct_copies(model: nn.Module, k: int) -> list[nn.Module]:
    """``k`` training-mode CPU copies of ``model`` whose floating-point weights differ (scaled by 0.5..1.5),
    so a trial that mixed the models' weights would show."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(k):
        m = copy.deepcopy(model).cpu().train()
        with torch.no_grad():
            for t in (*m.parameters(), *m.buffers()):
                if i and t.is_floating_point():
                    t.mul_(0.5 + torch.rand(t.shape, generator=g).to(t.dtype))
        out.append(m)
    return out


@dataclass
class Stack:
    """K models' parameters and buffers stacked along dimension 0, and a ``meta`` copy of the
    architecture to call them with (``torch.func`` model ensembling)."""

    params: dict[str, Tensor]
    buffers: dict[str, Tensor]
    base: nn.Module
    keys: list[str]          # the state-dict keys of one model, in its own order
    k: int
    name = "vmap"

    @classmethod
    def of(cls, models: list[nn.Module]) -> "Stack":
        params, buffers = stack_module_state(models)
        base = copy.deepcopy(models[0]).to("meta")
        return cls(params, buffers, base, list(models[0].state_dict()), len(models))

    def parameters(self) -> list[Tensor]:
        """The stacked parameters, in the order of one model's ``parameters()`` (tensor i: parameter i)."""
        return list(self.params.values())

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[K, B, classes]`` of inputs ``[K, B, ...]`` (model k reads ``x[k]``)."""

        def one(p: dict, b: dict, xb: Tensor) -> Tensor:
            return functional_call(self.base, (p, b), (xb,))

        return torch.vmap(one)(self.params, self.buffers, x)

    def state_dict(self, k: int) -> dict[str, Tensor]:
        """Model ``k``'s state dict: the keys, order and shapes of a model trained on its own."""
        both = {**self.params, **self.buffers}
        return {key: both[key][k].detach().clone() for key in self.keys}


class GroupedLinear(nn.Module):
    """K ``nn.Linear`` side by side: inputs ``[..., K * in]`` (model k's features in block k) to outputs
    ``[..., K * out]``; ``weight`` ``[K, out, in]`` and ``bias`` ``[K, out]`` hold the K layers' own."""

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)

    def forward(self, x: Tensor) -> Tensor:
        k, out_f, in_f = self.weight.shape
        y = torch.einsum("...ki,koi->...ko", x.reshape(*x.shape[:-1], k, in_f), self.weight)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], k * out_f)


class _WideConv:
    """A convolution holding K models' (``groups = K * their groups``). On the CPU, one whose groups read a
    single input channel each (a grayscale stem) runs as K plain convolutions over its channel blocks:
    oneDNN's grouped kernel for one-channel groups took 30x longer than K plain ones (measured: 1 to 32
    channels, 28x28 inputs, batch 128, K = 2)."""

    k: int = 1

    def forward(self, x: Tensor) -> Tensor:
        if not (x.device.type == "cpu" and self.in_channels == self.groups and self.padding_mode == "zeros"):
            return super().forward(x)
        conv = F.conv2d if isinstance(self, nn.Conv2d) else F.conv1d
        biases = self.bias.chunk(self.k) if self.bias is not None else [None] * self.k
        return torch.cat([conv(xk, wk, bk, self.stride, self.padding, self.dilation, self.groups // self.k)
                          for xk, wk, bk in zip(x.chunk(self.k, 1), self.weight.chunk(self.k), biases)], 1)


class WideConv1d(_WideConv, nn.Conv1d):
    pass


class WideConv2d(_WideConv, nn.Conv2d):
    pass


#: the layers :class:`Wide` widens (exactly these types: a subclass may compute something else)
WIDE_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Linear, nn.BatchNorm1d, nn.BatchNorm2d)


def _wide_layer(parts: list[nn.Module]) -> nn.Module:
    """One layer holding the K layers ``parts`` side by side along the channels (blocks in model order)."""
    m, k = parts[0], len(parts)
    cat = [torch.cat([getattr(p, n).detach() for p in parts]) for n in ("weight", "bias")
           if getattr(m, n, None) is not None]
    if type(m) is nn.Linear:
        return GroupedLinear(torch.stack([p.weight.detach() for p in parts]),
                             None if m.bias is None else torch.stack([p.bias.detach() for p in parts]))
    if type(m) in (nn.Conv1d, nn.Conv2d):
        cls = WideConv2d if type(m) is nn.Conv2d else WideConv1d
        wide = cls(k * m.in_channels, k * m.out_channels, m.kernel_size, m.stride, m.padding, m.dilation,
                   groups=k * m.groups, bias=m.bias is not None, padding_mode=m.padding_mode,
                   device=m.weight.device, dtype=m.weight.dtype)
        wide.k = k
    else:
        wide = type(m)(k * m.num_features, m.eps, m.momentum, m.affine, m.track_running_stats,
                       device=(m.weight if m.affine else m.running_mean).device)
        for n in ("running_mean", "running_var"):
            if getattr(m, n, None) is not None:
                getattr(wide, n).copy_(torch.cat([getattr(p, n) for p in parts]))
        if m.num_batches_tracked is not None:
            wide.num_batches_tracked.copy_(m.num_batches_tracked)
    with torch.no_grad():
        for t, v in zip([wide.weight, wide.bias][: len(cat)], cat):
            t.copy_(v)
    return wide


@dataclass
class Wide:
    """K models as one "wide" model: every convolution, linear and BatchNorm layer holds the K models' layers
    side by side (grouped convolutions with ``groups = K * groups``, :class:`GroupedLinear`, BatchNorm over
    K * C channels), so model k's activations are channel block k and one plain forward pass trains all.
    Exact for architectures whose other operations act on each channel alone (ReLU, pooling, flattening,
    residual sums): :meth:`check` compares it with the models' own forward passes before it is used. On the
    CPU this is the fast path: a grouped convolution's backward pass costs about K plain ones, where
    ``vmap``'s convolution backward took 8x longer (measured with the small CNN on 28x28 inputs)."""

    module: nn.Module
    keys: dict[str, torch.Size]  # one model's state-dict keys (in order) and shapes
    shapes: list[torch.Size]     # one model's parameter shapes, in its ``parameters()`` order
    k: int
    name = "wide"

    @classmethod
    def of(cls, models: list[nn.Module]) -> "Wide":
        wide = copy.deepcopy(models[0])
        named = [dict(m.named_modules()) for m in models]
        for name, mod in list(wide.named_modules()):
            if type(mod) in WIDE_LAYERS:
                parent, _, attr = name.rpartition(".")
                setattr(wide.get_submodule(parent), attr, _wide_layer([n[name] for n in named]))
            elif any(True for _ in mod.parameters(recurse=False)) or any(True for _ in mod.buffers(recurse=False)):
                raise ValueError(f"{type(mod).__name__} ({name}) holds weights Wide cannot widen")
        return cls(wide, {key: v.shape for key, v in models[0].state_dict().items()},
                   [p.shape for p in models[0].parameters()], len(models))

    @classmethod
    def check(cls, models: list[nn.Module], xs: Tensor) -> str | None:
        """None when the wide model of ``models`` gives each model's own training-mode outputs on ``xs[k]``
        (to 1e-4 of their scale), else why not."""
        try:
            with torch.no_grad():
                got = cls.of([copy.deepcopy(m) for m in models]).forward(xs)
                want = torch.stack([copy.deepcopy(m)(x) for m, x in zip(models, xs)])
        except Exception as e:  # noqa: BLE001 - an architecture it cannot widen
            return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max())):
            return "the wide model's outputs differ from the models' own (an operation mixes channels)"
        return None

    def parameters(self) -> list[Tensor]:
        return list(self.module.parameters())

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[K, B, classes]`` of inputs ``[K, B, C, ...]`` (model k reads ``x[k]``)."""
        k, b = x.shape[:2]
        out = self.module(x.transpose(0, 1).reshape(b, k * x.shape[2], *x.shape[3:]))
        return out.reshape(b, k, -1).transpose(0, 1)

    def state_dict(self, k: int) -> dict[str, Tensor]:
        """Model ``k``'s state dict (block k of every widened tensor; a shared step count as it is)."""
        full = self.module.state_dict()
        return {key: full[key].detach().clone() if full[key].dim() == 0 else
                full[key].reshape(self.k, *shape)[k].detach().clone() for key, shape in self.keys.items()}


def optimizer_state(opt: torch.optim.Optimizer, k: int, engine) -> dict:
    """Model ``k``'s share of the batched optimizer's state, in the format of its own optimizer's
    ``state_dict()`` (parameter i of the model is the engine's tensor i): a sequential ``fit`` resumes from it."""
    sd = opt.state_dict()
    state = {i: {name: v.reshape(engine.k, *engine.shapes[i])[k].clone() if torch.is_tensor(v) and v.dim() > 0
                 else v for name, v in s.items()} for i, s in sd["state"].items()}
    return {"state": state, "param_groups": copy.deepcopy(sd["param_groups"])}


def stacked_optimizer_state(states: list[dict], engine) -> dict:
    """The batched optimizer's state from K models' own optimizer states (:func:`optimizer_state`'s inverse)."""
    first, params = states[0], engine.parameters()
    state = {}
    for i, s in first["state"].items():
        state[i] = {name: torch.stack([st["state"][i][name] for st in states]).reshape(params[i].shape)
                    if torch.is_tensor(v) and v.dim() > 0 else v for name, v in s.items()}
    return {"state": state, "param_groups": copy.deepcopy(first["param_groups"])}


@dataclass
class _Run:
    """What one batched training holds: the stack, its optimizer, the models' generators and states."""

    stack: Stack | Wide
    opt: torch.optim.Optimizer
    gens: list[torch.Generator]
    states: list[FitState]
    seeds: list[int]


def _start(models: list[nn.Module], recipe: Recipe, seeds: list[int], resumes: list[dict] | None,
           example: Tensor, *, device: torch.device, engine: type | None = None) -> _Run:
    """The stack of ``models`` (moved to ``device``; resumed ones restored first), its optimizer and generators."""
    gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
    states = [FitState() for _ in models]
    if resumes is not None:
        epochs = {int(r["epoch"]) for r in resumes}
        if len(epochs) != 1:
            raise ValueError(f"batched models resume together from one epoch, not from {sorted(epochs)}")
        for model, gen, r in zip(models, gens, resumes):
            model.load_state_dict(r["model"])
            gen.set_state(r["generator"])
        states = [FitState(int(r["epoch"]), list(r["history"]), float(r["elapsed_s"])) for r in resumes]
    models = [m.to(device).train() for m in models]
    engine, why = (engine, None) if engine is not None else engine_for(models, example)
    if engine is None:
        raise ValueError(f"these models cannot be trained batched: {why}")
    stack = engine.of(models)
    opt = make_optimizer(stack.parameters(), recipe)
    if resumes is not None:
        opt.load_state_dict(stacked_optimizer_state([r["optimizer"] for r in resumes], stack))
    return _Run(stack, opt, gens, states, [int(s) for s in seeds])


def _batches(data: ArrayData, recipe: Recipe, run: _Run, aug: Augment | None, device: torch.device):
    """Per step: inputs ``[K, B, ...]`` and labels ``[K, B]``, model k's rows drawn from its own generator
    exactly as ``fit`` draws them (every model sees the same number of equally sized batches)."""
    iters = [data.batches(recipe.batch_size, shuffle=True, generator=g, augment=aug, device=device)
             for g in run.gens]
    for parts in zip(*iters):
        yield torch.stack([x for x, _ in parts]), torch.stack([y for _, y in parts])


def _epoch(run: _Run, batches, rt: Runtime, device: torch.device, pbar) -> tuple[Tensor, Tensor, int]:
    """One pass of cross-entropy steps for all K models: per-model loss sums and correct counts, and
    the rows each model saw."""
    k = run.stack.k
    loss_sum = torch.zeros(k, device=device)
    correct = torch.zeros(k, device=device, dtype=torch.long)
    seen = 0
    for xb, yb in batches:
        with rt.autocast(device):
            logits = run.stack.forward(xb)
            losses = F.cross_entropy(logits.flatten(0, 1), yb.flatten(), reduction="none").view(k, -1).mean(1)
        run.opt.zero_grad(set_to_none=True)
        losses.sum().backward()  # model k's parameters get the gradient of its own loss only
        run.opt.step()
        loss_sum += losses.detach().float() * yb.shape[1]
        correct += (logits.detach().argmax(-1) == yb).sum(1)
        seen += yb.shape[1]
        pbar.update(1)
    return loss_sum, correct, seen


def fit_batched(models: list[nn.Module], data: ArrayData, recipe: Recipe, augment: Augment | None = None, *,
                seeds: list[int], device: torch.device | str = "cpu", description: str = "train",
                progress: bool = True, resumes: list[dict] | None = None, on_epoch=None,
                runtime: Runtime | None = None, engine: type | None = None) -> list[FitState]:
    """Train ``models`` (K of one architecture, model k built after ``torch.manual_seed(seeds[k])``)
    together, each as :func:`unlearnkit.loop.fit` trains it with ``seed=seeds[k]`` (module docstring:
    equal up to float rounding); their weights are loaded back into them. Returns one history per model;
    its ``elapsed_s`` is the model's share of the wall time (the whole divided by K).

    ``on_epoch(k, state)`` receives after each epoch model k's state in ``fit``'s resume format (model,
    optimizer, generator, epoch, history), so either loop resumes it; ``resumes``: such states, one per
    model, all of one epoch. ``engine``: :class:`Wide` or :class:`Stack` (default: :func:`engine_for` picks).
    Raises :class:`NonFiniteLossError` naming the seed whose loss diverged."""
    device = torch.device(device)
    rt = runtime or Runtime()
    run = _start(models, recipe, seeds, resumes, data.normalize(data.x[:2]), device=device, engine=engine)
    aug = augment if recipe.augment else None
    (data,) = rt.place([data], device)
    steps = -(-len(data) // recipe.batch_size)
    start = run.states[0].epoch
    with bar(recipe.epochs * steps, f"{description} ×{len(models)}", progress) as pbar, rt.backend(device):
        pbar.update(start * steps)
        for epoch in range(start, recipe.epochs):
            t0 = time.perf_counter()
            for g in run.opt.param_groups:
                g["lr"] = lr_at(recipe, epoch)
            loss_sum, correct, seen = _epoch(run, _batches(data, recipe, run, aug, device), rt, device, pbar)
            _record(run, recipe, epoch, (loss_sum / seen).tolist(), (100.0 * correct / seen).tolist(),
                    share_s=(time.perf_counter() - t0) / len(models), description=description)
            pbar.update(0, loss=sum(s.history[-1]["loss"] for s in run.states) / len(models))
            if on_epoch is not None:
                for k in range(len(models)):
                    on_epoch(k, _resume_state(run, k))
    for k, model in enumerate(models):
        model.load_state_dict(run.stack.state_dict(k))
    return run.states


def _record(run: _Run, recipe: Recipe, epoch: int, losses: list[float], accs: list[float], *, share_s: float,
            description: str) -> None:
    """Each model's epoch record (as ``fit`` writes it); a non-finite loss stops all, naming its seed."""
    for seed, state, loss, acc in zip(run.seeds, run.states, losses, accs):
        if not torch.isfinite(torch.tensor(loss)):
            raise NonFiniteLossError(f"{description} (seed {seed}): loss became {loss} in epoch {epoch + 1}; "
                                     f"lower the learning rate ({recipe.lr:g})")
        state.history.append({"epoch": epoch + 1, "loss": loss, "acc": acc, "lr": lr_at(recipe, epoch)})
        state.elapsed_s += share_s
        state.epoch = epoch + 1


def _resume_state(run: _Run, k: int) -> dict:
    """Model k's state after an epoch, in :func:`unlearnkit.loop.fit`'s ``on_epoch`` format."""
    s = run.states[k]
    return {"model": run.stack.state_dict(k), "optimizer": optimizer_state(run.opt, k, run.stack),
            "generator": run.gens[k].get_state(), "epoch": s.epoch, "history": copy.deepcopy(s.history),
            "elapsed_s": s.elapsed_s}
