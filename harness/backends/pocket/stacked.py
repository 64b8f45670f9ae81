"""M pocket decoders of one size as stacked tensors: the forward of population training (population.py).

The parameters of the M members live in one (M, N) buffer (``FlatParams``; each member's row holds every
parameter of its model, q/k/v and gate/up fused, zero-padded to a multiple of 64 floats) and every matrix product
is one batched product over the members (``torch.bmm``/``baddbmm``). The function per member is
``fast.FastDecoder``'s; what differs, numerically only:
  * q/k/v and gate/up are fused matrices and products run batched, so float sums block differently;
  * RMSNorm is ``F.rms_norm`` without weight, then the member's weight;
  * a member's rows are padded to fixed widths (the task's longest prompt, ``max_new_tokens`` responses) and
    row counts to a multiple of 16 instead of being trimmed: padding is masked and never read;
  * no shared-prefix split (pocket prompts are short and have none).
A member's numbers do not depend on the other members: with those fixed shapes every op works on each member's
slice alone (batched products per member, row-wise norms and softmaxes, element-wise ops on slices whose size is a
multiple of the vector width), so one member trained alone and in a population of 16 is bit-identical
(tests/pocket/test_population.py). Only pocket sizes (tied Qwen2 decoders, ``models.build_pocket_model``) stack.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# the members' gradients are strided views of one buffer on purpose (FlatParams); torch warns once that such a
# gradient "may impair performance" (it accumulates in place all the same)
warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")

ROW_MULTIPLE = 16  # rows of every stacked batch: a member's slice of any activation is a multiple of 32 floats
FLAT_MULTIPLE = 64  # floats per member row of the parameter buffer


@dataclass(frozen=True)
class Piece:
    """Where one HF parameter lives: stacked key ``key``, rows ``start:stop`` of its first dimension."""

    hf: str
    key: str
    start: int | None = None
    stop: int | None = None


def why_not(model) -> str | None:
    """None when ``model`` can be stacked (a pocket-size tied Qwen2 decoder), else the reason."""
    from . import fast

    reason = fast.why_unsupported(model)
    if reason:
        return reason
    s = fast.spec_of(model)
    if s.family != "qwen2" or not s.tied or s.kv_heads != s.heads or s.out_bias or s.mlp_bias:
        return "only the pocket sizes (tied Qwen2 decoders, full attention heads) train as a population"
    return None


def layout(model) -> list[Piece]:
    """The piece of every HF parameter, in ``model.parameters()`` order (the optimizer's state order)."""
    d, inter = model.config.hidden_size, model.config.intermediate_size
    by_name = {"model.embed_tokens.weight": Piece("model.embed_tokens.weight", "embed")}
    by_name["model.norm.weight"] = Piece("model.norm.weight", "norm")
    for i in range(model.config.num_hidden_layers):
        p = f"model.layers.{i}."
        for j, x in enumerate("qkv"):
            for kind in ("weight", "bias"):
                name = f"{p}self_attn.{x}_proj.{kind}"
                by_name[name] = Piece(name, f"{i}.qkv_{kind[0]}", j * d, (j + 1) * d)
        for j, x in enumerate(("gate", "up")):
            by_name[f"{p}mlp.{x}_proj.weight"] = Piece(
                f"{p}mlp.{x}_proj.weight", f"{i}.gu_w", j * inter, (j + 1) * inter
            )
        by_name[f"{p}self_attn.o_proj.weight"] = Piece(f"{p}self_attn.o_proj.weight", f"{i}.o_w")
        by_name[f"{p}mlp.down_proj.weight"] = Piece(f"{p}mlp.down_proj.weight", f"{i}.down_w")
        by_name[f"{p}input_layernorm.weight"] = Piece(f"{p}input_layernorm.weight", f"{i}.ln1")
        by_name[f"{p}post_attention_layernorm.weight"] = Piece(f"{p}post_attention_layernorm.weight", f"{i}.ln2")
    names = [n for n, _ in model.named_parameters()]  # tied: lm_head.weight is embed (not listed again)
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"population: cannot stack parameter(s) {missing[:3]}")
    return [by_name[n] for n in names]


class FlatParams:
    """The parameters of M members in one (M, N) storage ``flat``: ``views()`` gives {key: (M, *shape)} leaf
    tensors that share it, whose gradients land in one (M, N) buffer ``grad``. The optimizer updates ``flat``
    with a handful of large element-wise ops per step; each key is its own leaf, so a backward writes only the
    gradient of what it touched (views of one big leaf would each materialise a full-size gradient)."""

    def __init__(self, pieces: list[Piece], shapes: dict[str, tuple], flat: torch.Tensor, requires_grad: bool):
        self.pieces, self.shapes, self.flat = pieces, shapes, flat
        self.requires_grad = requires_grad
        self.offsets, off = {}, 0
        for key, shape in shapes.items():
            n = 1
            for s in shape:
                n *= s
            self.offsets[key] = (off, n)
            off += n
        self.grad = torch.zeros_like(flat) if requires_grad else None
        self._leaves = self._views(flat)
        if requires_grad:
            grads = self._views(self.grad)
            for k, leaf in self._leaves.items():
                leaf.requires_grad_(True)
                leaf.grad = grads[k]  # backward accumulates into the buffer in place

    @classmethod
    def from_members(cls, pieces: list[Piece], per_member: list[dict[str, torch.Tensor]], requires_grad=True):
        """From each member's {hf name: tensor} (fused pieces concatenated along dim 0)."""
        groups: dict[str, list[Piece]] = {}
        for p in pieces:
            groups.setdefault(p.key, []).append(p)
        for parts in groups.values():
            parts.sort(key=lambda p: p.start or 0)
        rows, shapes = [], None
        for sd in per_member:
            tensors = {k: torch.cat([sd[p.hf].detach() for p in ps]) for k, ps in groups.items()}
            shapes = shapes or {k: tuple(t.shape) for k, t in tensors.items()}
            rows.append(torch.cat([t.reshape(-1) for t in tensors.values()]))
        pad = (-rows[0].numel()) % FLAT_MULTIPLE
        flat = torch.stack([torch.nn.functional.pad(r, (0, pad)) for r in rows]).contiguous()
        return cls(pieces, shapes, flat, requires_grad)

    @property
    def members(self) -> int:
        return self.flat.shape[0]

    def _views(self, t: torch.Tensor) -> dict[str, torch.Tensor]:
        M = t.shape[0]
        return {k: t[:, off : off + n].view((M, *self.shapes[k])) for k, (off, n) in self.offsets.items()}

    def views(self) -> dict[str, torch.Tensor]:
        """{key: (M, *shape)} parameter tensors (leaves when the buffer trains)."""
        return self._leaves

    def zero_grad(self) -> None:
        self.grad.zero_()

    def member_tensors(self, m: int, source: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """{hf name: tensor} of member ``m`` (copies) from the buffer or from a tensor laid out like it."""
        views = self._views((self.flat if source is None else source)[m : m + 1].detach())
        out = {}
        for p in self.pieces:
            t = views[p.key][0]
            out[p.hf] = (t if p.start is None else t[p.start : p.stop]).clone()
        return out

    def layout_like(self, per_member: list[dict[str, torch.Tensor]]) -> torch.Tensor:
        """An (M, N) tensor laid out like the buffer from each member's {hf name: tensor} (optimizer states)."""
        return FlatParams.from_members(self.pieces, per_member, requires_grad=False).flat

    def subset(self, index: list[int], grad: bool = False):
        """The members ``index``: a detached copy (``grad`` False), or {key: tensor} differentiable into this
        buffer (``grad`` True; the whole buffer itself when ``index`` is every member in order)."""
        if not grad:
            return FlatParams(self.pieces, self.shapes, self.flat[index], False)
        if index == list(range(self.members)):
            return self
        rows = torch.tensor(index, device=self.flat.device)
        sub = object.__new__(FlatParams)
        sub.__dict__.update(self.__dict__)
        sub._leaves = {k: v[rows] for k, v in self._leaves.items()}
        sub.flat = None  # a differentiable selection, not a buffer
        return sub


class StackedDecoder:
    """The forward of the M pocket decoders whose parameters are ``params`` (a ``FlatParams``)."""

    def __init__(self, template, params: FlatParams):
        reason = why_not(template)
        if reason:
            raise ValueError(f"population: {reason}")
        c = template.config
        self.flat = params
        self.layers, self.heads = c.num_hidden_layers, c.num_attention_heads
        self.width = c.hidden_size
        self.head_dim = c.hidden_size // c.num_attention_heads
        self.eps = float(c.rms_norm_eps)
        self.scale = self.head_dim**-0.5
        rot = template.model.rotary_emb
        inv = rot.inv_freq.detach().float().cpu()
        n_pos = max(int(c.max_position_embeddings), 1)
        freqs = torch.arange(n_pos, dtype=torch.float32)[:, None] * inv[None, :]  # as HF and fast.py: bit-identical
        emb = torch.cat((freqs, freqs), dim=-1)
        half = self.head_dim // 2
        sign = torch.cat((-torch.ones(half), torch.ones(half)))
        self._cos, self._sin = emb.cos() * rot.attention_scaling, emb.sin() * rot.attention_scaling * sign
        self._tables = {}

    def with_params(self, params: FlatParams) -> StackedDecoder:
        """The same decoder over other parameters (a subset of the members, the auxiliary model)."""
        other = object.__new__(StackedDecoder)
        other.__dict__.update(self.__dict__)
        other.flat = params
        return other

    @property
    def members(self) -> int:
        return next(iter(self.flat.views().values())).shape[0]

    def _rope_tables(self, device, dtype, n_pos: int):
        if n_pos > self._cos.shape[0]:
            raise ValueError(f"population: a sequence of {n_pos} positions, past the model's {self._cos.shape[0]}")
        key = (str(device), dtype)
        if key not in self._tables:
            self._tables[key] = (self._cos.to(device=device, dtype=dtype), self._sin.to(device=device, dtype=dtype))
        return self._tables[key]

    # ------------------------------------------------------------------------------------ pieces
    @staticmethod
    def _embed(p, ids: torch.Tensor) -> torch.Tensor:
        """ids (M, ...) -> (M, ..., d): each member's rows of its own table."""
        w = p["embed"]
        M, V, d = w.shape
        offset = (torch.arange(M, device=ids.device) * V).view((M,) + (1,) * (ids.dim() - 1))
        return F.embedding(ids + offset, w.reshape(M * V, d))

    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """RMSNorm of x (M, ..., d) with each member's weight w (M, d)."""
        shape = (w.shape[0],) + (1,) * (x.dim() - 2) + (w.shape[1],)
        return F.rms_norm(x, (x.shape[-1],), None, self.eps) * w.view(shape)

    @staticmethod
    def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        """x (M, ..., in) @ w (M, out, in)^T (+ b (M, out)) -> (M, ..., out), one batched product."""
        M, n_in = x.shape[0], x.shape[-1]
        flat = x.reshape(M, -1, n_in)
        wt = w.transpose(1, 2)
        out = torch.bmm(flat, wt) if b is None else torch.baddbmm(b[:, None, :], flat, wt)
        return out.view(x.shape[:-1] + (w.shape[1],))

    def _rope(self, qk, cos, sin):
        return torch.addcmul(qk * cos, qk.roll(self.head_dim // 2, -1), sin)

    def _block(self, p, i: int, x, cos, sin, attend, rows: int | None = None):
        """One decoder layer on x (M, B, L, d); ``attend(q, k, v)`` gets (M*B, H, L, hd) tensors."""
        M, B, L, d = x.shape
        H, hd = self.heads, self.head_dim
        h = self._norm(x, p[f"{i}.ln1"])
        qk, v = self._linear(h, p[f"{i}.qkv_w"], p[f"{i}.qkv_b"]).split((2 * d, d), dim=-1)
        q, k = self._rope(qk.reshape(M, B, L, 2 * H, hd), cos, sin).split((H, H), dim=3)
        if rows is not None and rows < L:
            q, x = q[:, :, -rows:], x[:, :, -rows:]
        Lq = q.shape[2]
        q = q.reshape(M * B, Lq, H, hd).transpose(1, 2)
        k = k.reshape(M * B, L, H, hd).transpose(1, 2)
        v = v.reshape(M * B, L, H, hd).transpose(1, 2)
        o = attend(q, k, v).transpose(1, 2).reshape(M, B, Lq, d)
        x = x + self._linear(o, p[f"{i}.o_w"])
        h = self._norm(x, p[f"{i}.ln2"])
        g, u = self._linear(h, p[f"{i}.gu_w"]).chunk(2, dim=-1)
        return x + self._linear(F.silu(g) * u, p[f"{i}.down_w"])

    def _sdpa(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)

    # ------------------------------------------------------------------------------------ forward
    def hidden(self, ids: torch.Tensor, att: torch.Tensor, keep: int | None = None, p=None) -> torch.Tensor:
        """(M, B, keep, d) final hidden states (after the last norm) of the last ``keep`` positions."""
        p = p or self.flat.views()
        M, B, L = ids.shape
        emb = p["embed"]
        pos = (att.long().cumsum(-1) - 1).clamp(min=0)
        cos_t, sin_t = self._rope_tables(emb.device, emb.dtype, L)
        cos, sin = cos_t[pos][..., None, :], sin_t[pos][..., None, :]
        idx = torch.arange(L, device=ids.device)
        causal = idx[None, :] <= idx[:, None]
        eye = torch.eye(L, dtype=torch.bool, device=ids.device)
        mask = ((causal[None] & att.reshape(M * B, L).bool()[:, None, :]) | eye[None])[:, None]

        def attend(q, k, v):
            return self._sdpa(q, k, v, mask if q.shape[2] == L else mask[:, :, -q.shape[2] :])

        x = self._embed(p, ids)
        for i in range(self.layers):
            x = self._block(p, i, x, cos, sin, attend, rows=keep if i == self.layers - 1 else None)
        if keep is not None:
            x = x[:, :, -keep:]
        return self._norm(x, p["norm"])

    def response_logits(self, ids, att, T: int, p=None) -> torch.Tensor:
        """(M, B, T, V) logits predicting the last T tokens of ``ids`` (the responses)."""
        p = p or self.flat.views()
        return self._linear(self.hidden(ids, att, keep=T + 1, p=p)[:, :, :T], p["embed"])

    def token_logprobs(self, ids, att, responses, mask, temperature: float, with_entropy: bool):
        """(log-probs (M, B, T), entropy (M, B, T) or None) of the responses (the last T columns of ``ids``), 0 on
        padding: log_softmax(z / temperature)[target] and -sum p log p of that distribution (as the one-block
        path of ``chunked.head_logprobs``)."""
        return logprobs_from_logits(
            self.response_logits(ids, att, responses.shape[-1]), responses, mask, temperature, with_entropy
        )

    # ------------------------------------------------------------------------------------ generation
    @torch.no_grad()
    def start(self, ids: torch.Tensor, att: torch.Tensor, max_new_tokens: int, expand: torch.Tensor | None = None):
        """Prefill a KV cache with the left-padded prompts ids (M, n, P); ``expand`` (B,) maps generated rows to
        prompt rows (the same map for every member). Returns (state, last logits (M, B, V))."""
        p = self.flat.views()
        M, n, P = ids.shape
        B = n if expand is None else expand.shape[0]
        H, hd, dev = self.heads, self.head_dim, ids.device
        emb = p["embed"]
        cache = torch.empty((self.layers, 2, M, B, H, P + max_new_tokens, hd), dtype=emb.dtype, device=dev)
        pos = (att.long().cumsum(-1) - 1).clamp(min=0)
        cos_t, sin_t = self._rope_tables(dev, emb.dtype, P + max_new_tokens)
        idx = torch.arange(P, device=dev)
        eye = torch.eye(P, dtype=torch.bool, device=dev)
        mask = (((idx[None, :] <= idx[:, None])[None] & att.reshape(M * n, P).bool()[:, None, :]) | eye[None])[:, None]
        x = self._embed(p, ids)
        cos, sin = cos_t[pos][..., None, :], sin_t[pos][..., None, :]
        for i in range(self.layers):

            def attend(q, k, v, i=i):
                kk, vv = k.view(M, n, H, P, hd), v.view(M, n, H, P, hd)
                cache[i, 0, :, :, :, :P] = kk if expand is None else kk[:, expand]
                cache[i, 1, :, :, :, :P] = vv if expand is None else vv[:, expand]
                return self._sdpa(q, k, v, mask if q.shape[2] == P else mask[:, :, -q.shape[2] :])

            x = self._block(p, i, x, cos, sin, attend, rows=1 if i == self.layers - 1 else None)
        logits = self._linear(self._norm(x[:, :, -1], p["norm"]), p["embed"])
        if expand is not None:
            logits, att, pos = logits[:, expand], att[:, expand], pos[:, expand]
        full = torch.ones((M, B, P + max_new_tokens), dtype=torch.bool, device=dev)
        full[:, :, :P] = att.bool()
        state = {"p": p, "cache": cache, "att": full, "len": P, "pos": pos[:, :, -1], "tables": (cos_t, sin_t)}
        return state, logits

    @torch.no_grad()
    def step(self, state: dict, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row (M, B) to the cache; returns the next logits (M, B, V)."""
        p, cache, n = state["p"], state["cache"], state["len"]
        M, B = tokens.shape
        H, hd = self.heads, self.head_dim
        state["pos"] = state["pos"] + 1
        cos_t, sin_t = state["tables"]
        pos = state["pos"][..., None]
        cos, sin = cos_t[pos][..., None, :], sin_t[pos][..., None, :]
        mask = state["att"][:, :, : n + 1].reshape(M * B, 1, 1, n + 1)
        x = self._embed(p, tokens[..., None])
        for i in range(self.layers):

            def attend(q, k, v, i=i):
                cache[i, 0, :, :, :, n : n + 1] = k.view(M, B, H, 1, hd)
                cache[i, 1, :, :, :, n : n + 1] = v.view(M, B, H, 1, hd)
                kk = cache[i, 0, :, :, :, : n + 1].reshape(M * B, H, n + 1, hd)
                vv = cache[i, 1, :, :, :, : n + 1].reshape(M * B, H, n + 1, hd)
                return self._sdpa(q, kk, vv, mask)

            x = self._block(p, i, x, cos, sin, attend)
        state["len"] = n + 1
        return self._linear(self._norm(x[:, :, 0], p["norm"]), p["embed"])


def logprobs_from_logits(logits, responses, mask, temperature: float, with_entropy: bool):
    """(log-probs, entropy or None) of ``responses`` under ``logits`` / temperature, 0 where ``mask`` is 0."""
    ls = torch.log_softmax(logits / temperature, dim=-1)
    lp = ls.gather(-1, responses[..., None]).squeeze(-1) * mask
    return lp, (-(ls.exp() * ls).sum(-1) * mask if with_entropy else None)
