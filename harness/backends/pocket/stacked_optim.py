"""The optimizers of ``train.optimizer`` over a population's (M, N) parameter buffer, one step count per member.

A member's update is what ``torch.optim.AdamW``/``SGD`` compute for its parameters (torch's single-tensor
AdamW formula: decoupled weight decay, ``lerp`` of the first moment, bias corrections in float64); the separate
run's fused AdamW kernel rounds a little differently. Members not ``active`` in a step (their step made no update:
every group filtered out, or a mini-batch with no rows) keep their parameters, moments and step count, as a
separate run that skips ``opt.step()``. Gradient clipping is per member: the norm of the member's whole gradient,
as ``clip_grad_norm_`` over its model's parameters.
"""

from __future__ import annotations

import math

import torch

from .stacked import FlatParams


class StackedOptimizer:
    """``kind``: adamw | adamw_b1_0 | sgd (``train.optimizer``); ``lr``: one value or one per member."""

    def __init__(self, params: FlatParams, kind: str, lr, weight_decay: float = 0.0, eps: float = 1e-8):
        if kind not in ("adamw", "adamw_b1_0", "sgd"):
            raise ValueError(f"population: optimizer {kind!r} (allowed: adamw, adamw_b1_0, sgd)")
        self.params, self.kind, self.eps, self.weight_decay = params, kind, eps, float(weight_decay)
        M = params.members
        lrs = [float(x) for x in lr] if isinstance(lr, (list, tuple)) else [float(lr)] * M
        self.lr = lrs
        self.betas = (0.0 if kind == "adamw_b1_0" else 0.9, 0.999)
        flat = params.flat
        self.steps = [0] * M
        self.exp_avg = torch.zeros_like(flat, requires_grad=False) if kind != "sgd" else None
        self.exp_avg_sq = torch.zeros_like(flat, requires_grad=False) if kind != "sgd" else None
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def _scratch(self, shape) -> tuple[torch.Tensor, torch.Tensor]:
        """Two work buffers of ``shape``, kept between steps."""
        if self._buffers is None or self._buffers[0].shape != shape:
            like = self.params.flat
            self._buffers = tuple(torch.empty(shape, dtype=like.dtype, device=like.device) for _ in range(2))
        return self._buffers

    def _column(self, values, rows) -> torch.Tensor:
        flat = self.params.flat
        return torch.tensor([values[r] for r in rows], dtype=torch.float64).to(flat.dtype).to(flat.device)[:, None]

    # ------------------------------------------------------------------------------------ gradients
    def zero_grad(self) -> None:
        self.params.zero_grad()

    def clip_(self, max_norm: float) -> list[float]:
        """Scale each member's gradient to norm <= ``max_norm`` (0 or inf: no clipping); returns the norms before.
        ``clip_grad_norm_``'s rule: coefficient max_norm / (norm + 1e-6), clamped to 1."""
        grad = self.params.grad
        norms = torch.linalg.vector_norm(grad, dim=1)  # one row per member; each row's sum is the row's alone
        limit = max_norm if max_norm > 0 else float("inf")
        coef = torch.clamp(limit / (norms + 1e-6), max=1.0)
        grad.mul_(coef[:, None])
        return [float(x) for x in norms]

    # ------------------------------------------------------------------------------------ step
    @torch.no_grad()
    def step(self, active: list[bool] | None = None) -> None:
        """One update of the members marked ``active`` (all when None)."""
        M = self.params.members
        rows = [m for m in range(M) if active is None or active[m]]
        if not rows:
            return
        for m in rows:
            self.steps[m] += 1
        flat, grad = self.params.flat, self.params.grad
        whole = len(rows) == M
        index = None if whole else torch.tensor(rows, device=flat.device)

        def take(t):
            return t if whole else t[index]

        p, g = take(flat), take(grad)
        lr = self._column(self.lr, rows)
        if self.kind == "sgd":
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            p.sub_(g * lr)
        else:
            m1, m2 = take(self.exp_avg), take(self.exp_avg_sq)
            b1, b2 = self.betas
            if self.weight_decay:
                p.mul_(1 - lr * self.weight_decay)
            m1.lerp_(g, 1 - b1)
            m2.mul_(b2).addcmul_(g, g, value=1 - b2)
            step_size = self._column({m: self.lr[m] / (1 - b1 ** self.steps[m]) for m in rows}, rows)
            bc2_sqrt = self._column({m: math.sqrt(1 - b2 ** self.steps[m]) for m in rows}, rows)
            # (m2.sqrt() / bc2_sqrt + eps) and m1 / denom * step_size, op for op, into kept buffers: a fresh
            # (M, N) temporary per op cost as much as the arithmetic at pocket-1m (page faults)
            denom, update = self._scratch(m2.shape)
            torch.sqrt(m2, out=denom).div_(bc2_sqrt).add_(self.eps)
            p.sub_(torch.div(m1, denom, out=update).mul_(step_size))
            if not whole:
                self.exp_avg[index], self.exp_avg_sq[index] = m1, m2
        if not whole:
            flat[index] = p

    # ------------------------------------------------------------------------------------ members
    def load_member(self, m: int, torch_opt: torch.optim.Optimizer, model) -> None:
        """Member ``m``'s state from its separate-run optimizer ``torch_opt`` over ``model``'s parameters."""
        if self.kind == "sgd":
            return
        states = [torch_opt.state.get(p, {}) for p in model.parameters()]
        steps = {int(float(s["step"])) for s in states if "step" in s}
        if len(steps) > 1:
            raise ValueError(f"population: the optimizer state of member {m} has parameters at steps {sorted(steps)}")
        self.steps[m] = steps.pop() if steps else 0
        if not self.steps[m]:
            return
        names = [p.hf for p in self.params.pieces]
        for key, target in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
            row = self.params.layout_like([{n: s[key] for n, s in zip(names, states)}])
            target[m] = row[0]

    def store_member(self, m: int, torch_opt: torch.optim.Optimizer, model) -> None:
        """Write member ``m``'s state into its separate-run optimizer (what a separate run would checkpoint)."""
        params = list(model.parameters())
        torch_opt.state.clear()
        if self.kind == "sgd" or not self.steps[m]:
            return
        avg = self.params.member_tensors(m, self.exp_avg)
        avg_sq = self.params.member_tensors(m, self.exp_avg_sq)
        fused = any(g.get("fused") for g in torch_opt.param_groups)
        for piece, p in zip(self.params.pieces, params):
            step = torch.tensor(float(self.steps[m]), dtype=torch.float32, device=p.device if fused else "cpu")
            torch_opt.state[p] = {"step": step, "exp_avg": avg[piece.hf], "exp_avg_sq": avg_sq[piece.hf]}

    def keep(self, index: list[int]) -> None:
        """Keep only the members ``index`` (in that order); the parameter buffer is cut by the caller."""
        self.lr = [self.lr[i] for i in index]
        self.steps = [self.steps[i] for i in index]
        if self.exp_avg is not None:
            self.exp_avg, self.exp_avg_sq = self.exp_avg[index], self.exp_avg_sq[index]
