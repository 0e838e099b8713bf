"""K models of one architecture trained together in one process, batched across the models.

The K models' parameters and buffers are stacked along a new leading dimension
(:func:`torch.func.stack_module_state`) and one forward pass of the architecture is mapped over that
dimension (:func:`torch.vmap` of :func:`torch.func.functional_call` on a ``meta`` copy of the module):
the pattern of PyTorch's "Model ensembling" tutorial (``torch.func`` docs), with each model given its
own minibatch. Under ``vmap`` a convolution over stacked weights and stacked inputs runs as one
grouped convolution and a linear layer as one batched matrix product, so K small models cost far
fewer operator calls than K trainings one after another.

**Faithful to** :func:`unlearnkit.loop.fit` (same :class:`~unlearnkit.loop.Recipe`): model ``k`` is
built by the caller after ``torch.manual_seed(seed_k)`` (the same initialisation as a sequential
training of that seed), draws its data order and augmentation from its own generator seeded with
``seed_k`` in the order ``fit`` draws them (one ``randperm`` per epoch, then each batch's crop and
flip draws), and is stepped by the recipe's optimizer: SGD (momentum, weight decay) and Adam act on
each element on its own, so one optimizer over the stacked tensors steps each model exactly as its
own optimizer would. The loss is the sum over the models of each model's mean cross-entropy, so
each model's gradient is that of its own loss. BatchNorm computes each model's batch statistics
over that model's batch and updates its own slice of the stacked running statistics in place.
What differs is only the order of floating-point work (a grouped convolution sums in another order
than K plain ones): a model trained here equals the sequential one up to float rounding, which
training then amplifies over many steps as any change of kernel or thread count does; Adam amplifies
it fastest (it divides gradients near its eps by their own size: after 8 float32 steps of the small
CNN, 4e-4 apart, where float64 agrees to 1e-15). ``tests/unit/test_batched_references.py`` checks
both: the weights after a few steps, and the accuracies of longer trainings against the spread of
sequential ones. The histories' ``elapsed_s`` is each model's share of the wall time (the whole / K).

Not batched (:func:`batch_support` says why in one line; the caller trains one after another):
several processes (``torchrun``: data-parallel references stay sequential), models that draw random
numbers in their forward pass (dropout: vmap cannot draw each model's masks from the global
generator in the order a sequential training would), ``torch.compile`` is not applied here
(``channels_last`` neither: both only reorder floating-point work), and any architecture whose
forward ``vmap`` cannot run (a trial forward and backward pass decides).
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


def batch_support(model: nn.Module, example: Tensor, *, runtime: Runtime | None = None) -> str | None:
    """None when :func:`fit_batched` can train copies of ``model``, else one line saying why not.
    ``example``: a few normalised input rows (the trial pass runs on deep copies, on the CPU)."""
    if distributed.world().size > 1:
        return "several processes (torchrun) train each reference data-parallel, one after another"
    random = sorted({type(m).__name__ for m in model.modules()
                     if isinstance(m, RANDOM_MODULES) and getattr(m, "p", 1.0) > 0})  # dropout of p=0 draws nothing
    if random:
        return (f"{', '.join(random)} draws random numbers in the forward pass, which vmap cannot draw per model "
                f"as sequential training does")
    if not any(p.requires_grad for p in model.parameters()):
        return "the model has no trainable parameter"
    try:
        copies = [copy.deepcopy(model).cpu().train() for _ in range(2)]
        stack = Stack.of(copies)
        x = example[:2].detach().cpu().to(torch.get_default_dtype())
        with (runtime or Runtime()).autocast(torch.device("cpu")):
            out = stack.forward(torch.stack([x, x]))
        out.float().sum().backward()
    except Exception as e:  # noqa: BLE001 - whatever vmap cannot run, the sequential loop can
        first = (str(e).strip().splitlines() or [""])[0][:160]
        return f"vmap cannot run this architecture ({type(e).__name__}: {first})"
    return None


@dataclass
class Stack:
    """K models' parameters and buffers stacked along dimension 0, and a ``meta`` copy of the
    architecture to call them with (``torch.func`` model ensembling)."""

    params: dict[str, Tensor]
    buffers: dict[str, Tensor]
    base: nn.Module
    keys: list[str]          # the state-dict keys of one model, in its own order

    @classmethod
    def of(cls, models: list[nn.Module]) -> "Stack":
        params, buffers = stack_module_state(models)
        base = copy.deepcopy(models[0]).to("meta")
        return cls(params, buffers, base, list(models[0].state_dict()))

    @property
    def k(self) -> int:
        return next(iter(self.params.values())).shape[0]

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[K, B, classes]`` of inputs ``[K, B, ...]`` (model k reads ``x[k]``)."""

        def one(p: dict, b: dict, xb: Tensor) -> Tensor:
            return functional_call(self.base, (p, b), (xb,))

        return torch.vmap(one)(self.params, self.buffers, x)

    def state_dict(self, k: int) -> dict[str, Tensor]:
        """Model ``k``'s state dict: the keys, order and shapes of a model trained on its own."""
        both = {**self.params, **self.buffers}
        return {key: both[key][k].detach().clone() for key in self.keys}


def optimizer_state(opt: torch.optim.Optimizer, k: int) -> dict:
    """Model ``k``'s share of the stacked optimizer's state, in the format of its own optimizer's
    ``state_dict()`` (parameter i of the model is stacked tensor i): a sequential ``fit`` resumes from it."""
    sd = opt.state_dict()
    state = {i: {name: v[k].clone() if torch.is_tensor(v) and v.dim() > 0 else v for name, v in s.items()}
             for i, s in sd["state"].items()}
    return {"state": state, "param_groups": copy.deepcopy(sd["param_groups"])}


def stacked_optimizer_state(states: list[dict]) -> dict:
    """The stacked optimizer's state from K models' own optimizer states (:func:`optimizer_state`'s inverse)."""
    first = states[0]
    state = {}
    for i, s in first["state"].items():
        state[i] = {name: torch.stack([st["state"][i][name] for st in states])
                    if torch.is_tensor(v) and v.dim() > 0 else v for name, v in s.items()}
    return {"state": state, "param_groups": copy.deepcopy(first["param_groups"])}


@dataclass
class _Run:
    """What one batched training holds: the stack, its optimizer, the models' generators and states."""

    stack: Stack
    opt: torch.optim.Optimizer
    gens: list[torch.Generator]
    states: list[FitState]
    seeds: list[int]


def _start(models: list[nn.Module], recipe: Recipe, seeds: list[int], resumes: list[dict] | None,
           device: torch.device) -> _Run:
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
    stack = Stack.of([m.to(device).train() for m in models])
    opt = make_optimizer(list(stack.params.values()), recipe)
    if resumes is not None:
        opt.load_state_dict(stacked_optimizer_state([r["optimizer"] for r in resumes]))
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
                runtime: Runtime | None = None) -> list[FitState]:
    """Train ``models`` (K of one architecture, model k built after ``torch.manual_seed(seeds[k])``)
    together, each as :func:`unlearnkit.loop.fit` trains it with ``seed=seeds[k]`` (module docstring:
    equal up to float rounding); their weights are loaded back into them. Returns one history per model;
    its ``elapsed_s`` is the model's share of the wall time (the whole divided by K).

    ``on_epoch(k, state)`` receives after each epoch model k's state in ``fit``'s resume format (model,
    optimizer, generator, epoch, history), so either loop resumes it; ``resumes``: such states, one per
    model, all of one epoch. Raises :class:`NonFiniteLossError` naming the seed whose loss diverged."""
    device = torch.device(device)
    rt = runtime or Runtime()
    run = _start(models, recipe, seeds, resumes, device)
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
    return {"model": run.stack.state_dict(k), "optimizer": optimizer_state(run.opt, k),
            "generator": run.gens[k].get_state(), "epoch": s.epoch, "history": copy.deepcopy(s.history),
            "elapsed_s": s.elapsed_s}
