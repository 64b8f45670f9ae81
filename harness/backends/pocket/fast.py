"""A lean forward for Qwen2- and Llama-family decoders that reads the HF module's own parameters (training
updates the real model).

The transformers forward is the reference (tests/pocket/test_fast.py holds this one to it on the pocket sizes,
a tiny random Llama and a tiny random Qwen2); this one computes the same function with fewer and larger tensor
ops. The two families differ only in what ``FAMILIES`` declares (which projections carry a bias, what else a
config may switch on); RoPE base (theta), RMSNorm eps, head counts and tied embeddings are read from the model.
What differs from the HF code, numerically only:
  * q/k/v (and gate/up) projections are one matmul over concatenated weights (same products, other blocking);
  * grouped-query attention uses SDPA's ``enable_gqa`` instead of repeating the key/value heads;
  * RMSNorm is ``torch.nn.functional.rms_norm`` (one fused op instead of five);
  * rotate_half is a roll by half the head with the sign folded into the sin table (exact);
  * padding query rows attend to themselves instead of nothing (their outputs are never used; this keeps
    them finite, so no NaN reaches a gradient);
  * generation writes keys/values into a preallocated cache instead of concatenating a growing one, and a
    prompt shared by several samples is prefilled once;
  * the last layer runs only the positions whose outputs are read (``rows``/``keep``), and ``hidden`` stops
    before the LM head, so a caller can apply the head in vocabulary chunks (``chunked.py``).
Only what ``why_unsupported`` accepts runs here; anything else runs the HF forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Family:
    """What one decoder family's transformers code does differently from the others (all else is shared)."""

    qkv_bias: Callable  # config -> bool: q/k/v projections carry a bias
    out_bias: Callable  # config -> bool: the attention output projection carries a bias
    mlp_bias: Callable  # config -> bool: gate/up/down carry biases
    refuse: Callable  # config -> reason this forward does not compute the configured model, or None


FAMILIES = {
    # Qwen2: q/k/v always biased, o_proj and MLP never; sliding-window layers are not computed here
    "qwen2": Family(
        qkv_bias=lambda c: True,
        out_bias=lambda c: False,
        mlp_bias=lambda c: False,
        refuse=lambda c: "sliding-window attention" if getattr(c, "use_sliding_window", False) else None,
    ),
    # Llama (SmolLM2): one ``attention_bias`` switch for q/k/v/o, ``mlp_bias`` for the MLP; tensor-parallel
    # pretraining slices are not computed here
    "llama": Family(
        qkv_bias=lambda c: bool(getattr(c, "attention_bias", False)),
        out_bias=lambda c: bool(getattr(c, "attention_bias", False)),
        mlp_bias=lambda c: bool(getattr(c, "mlp_bias", False)),
        refuse=lambda c: "pretraining_tp > 1" if (getattr(c, "pretraining_tp", 1) or 1) > 1 else None,
    ),
}


@dataclass(frozen=True)
class Spec:
    """The resolved shape of one model (read from its config and modules)."""

    family: str
    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    rope_theta: float
    tied: bool  # LM head shares the embedding matrix (SmolLM2); the head reads lm_head.weight either way
    qkv_bias: bool
    out_bias: bool
    mlp_bias: bool


def why_unsupported(model) -> str | None:
    """None when this module computes ``model`` exactly; else the reason (the HF forward runs instead)."""
    cfg = getattr(model, "config", None)
    family = FAMILIES.get(getattr(cfg, "model_type", None))
    if cfg is None or family is None or not hasattr(model, "model") or not hasattr(model, "lm_head"):
        return f"model type {getattr(cfg, 'model_type', None)!r} (supported: {', '.join(FAMILIES)})"
    rope = getattr(cfg, "rope_parameters", None) or {}
    heads, kv = cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    checks = [
        (cfg.hidden_act == "silu", f"activation {cfg.hidden_act!r}"),
        (rope.get("rope_type", "default") == "default", f"rope_type {rope.get('rope_type')!r}"),
        (heads % kv == 0, "query heads not a multiple of key/value heads"),
        (head_dim % 2 == 0, "odd head_dim"),
        (float(getattr(cfg, "attention_dropout", 0.0)) == 0.0, "attention dropout"),
        (set(getattr(cfg, "layer_types", None) or ["full_attention"]) == {"full_attention"}, "non-full attention"),
        (getattr(model.lm_head, "bias", None) is None, "LM head bias"),
    ]
    for ok, reason in checks:
        if not ok:
            return reason
    return family.refuse(cfg)


def supports(model) -> bool:
    """True for a Qwen2/Llama causal LM this module computes exactly (see ``why_unsupported``)."""
    return why_unsupported(model) is None


def spec_of(model) -> Spec:
    cfg = model.config
    fam = FAMILIES[cfg.model_type]
    heads = cfg.num_attention_heads
    rope = getattr(cfg, "rope_parameters", None) or {}
    return Spec(
        family=cfg.model_type,
        heads=heads,
        kv_heads=getattr(cfg, "num_key_value_heads", None) or heads,
        head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
        eps=float(cfg.rms_norm_eps),
        rope_theta=float(rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))),
        tied=model.lm_head.weight is model.model.embed_tokens.weight,
        qkv_bias=fam.qkv_bias(cfg),
        out_bias=fam.out_bias(cfg),
        mlp_bias=fam.mlp_bias(cfg),
    )


FUSE_MAX_PARAMS = 20_000_000  # training forwards of larger models run the projections unfused (see _layers)
CHECKPOINT_MIN_PARAMS = 50_000_000  # larger models recompute each layer in the backward (memory for time)
MIN_SHARED = 8  # a common prefix shorter than this is not split off


def _cat(*ts):
    return None if ts[0] is None else torch.cat(ts)


class FastDecoder:
    """Forward passes over ``model``'s parameters; build once per model (holds RoPE tables only)."""

    def __init__(self, model):
        reason = why_unsupported(model)
        if reason is not None:
            raise ValueError(f"FastDecoder: unsupported model configuration ({reason})")
        self.model = model
        self.spec = s = spec_of(model)
        self.heads, self.kv_heads, self.head_dim, self.eps = s.heads, s.kv_heads, s.head_dim, s.eps
        self.gqa = s.kv_heads != s.heads
        self.scale = self.head_dim**-0.5
        self.n_params = sum(p.numel() for p in model.parameters())
        self.share_prefix = True  # run a common prefix of the rows once (exact; tests switch it off to compare)
        self.checkpoint = self.n_params >= CHECKPOINT_MIN_PARAMS  # recompute layer activations in the backward
        rot = model.model.rotary_emb  # its inv_freq holds the configured theta (HF computed it)
        self._inv_freq = rot.inv_freq.detach().float().cpu()
        self._rope_scale = rot.attention_scaling
        self._n_pos = 0
        self._tables = {}
        self._build_tables(max(int(model.config.max_position_embeddings), 1))

    # ------------------------------------------------------------------------------------ pieces
    def _build_tables(self, n_pos: int) -> None:
        """cos and sign-folded sin for positions 0..n_pos-1 (HF computes any position; so do these)."""
        # HF: freqs = inv_freq (outer) positions, one product per entry, so the table is bit-identical
        freqs = torch.arange(n_pos, dtype=torch.float32)[:, None] * self._inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * self._rope_scale, emb.sin() * self._rope_scale
        half = self.head_dim // 2
        sign = torch.cat((-torch.ones(half), torch.ones(half)))
        self._tables_cpu = (cos, sin * sign)  # rotate_half(x) * sin == roll(x, hd/2) * (sign * sin), exactly
        self._n_pos, self._tables = n_pos, {}

    def _rope_tables(self, device, dtype, n_pos: int):
        if n_pos > self._n_pos:
            self._build_tables(max(n_pos, 2 * self._n_pos))
        key = (str(device), dtype)
        if key not in self._tables:
            self._tables[key] = tuple(t.to(device=device, dtype=dtype) for t in self._tables_cpu)
        return self._tables[key]

    def _layers(self, fuse: bool = True):
        """Per layer: (in-norm w, qkv projections, (o W, o b), post-norm w, gate/up projections, (down W, down b)).

        A projection list holds (W, b) pairs whose outputs are concatenated: fused = one pair of concatenated
        module parameters (gradients flow back to them), unfused = the modules' own. Fusing saves kernels at
        pocket widths but copies the weights (and their gradients) every forward: at SmolLM2's size that is
        ~280 MB each way for no speed gain, so training forwards of large models run unfused."""
        out = []
        for layer in self.model.model.layers:
            a, m = layer.self_attn, layer.mlp
            qkv, gu = (a.q_proj, a.k_proj, a.v_proj), (m.gate_proj, m.up_proj)
            if fuse:
                qkv = [(torch.cat([x.weight for x in qkv]), _cat(*[x.bias for x in qkv]))]
                gu = [(torch.cat([x.weight for x in gu]), _cat(*[x.bias for x in gu]))]
            else:
                qkv, gu = [(x.weight, x.bias) for x in qkv], [(x.weight, x.bias) for x in gu]
            out.append(
                (
                    layer.input_layernorm.weight,
                    qkv,
                    (a.o_proj.weight, a.o_proj.bias),
                    layer.post_attention_layernorm.weight,
                    gu,
                    (m.down_proj.weight, m.down_proj.bias),
                )
            )
        return out

    def _train_layers(self):
        return self._layers(fuse=not torch.is_grad_enabled() or self.n_params < FUSE_MAX_PARAMS)

    def _rope(self, qk, cos, sin):
        """qk (B, L, H+Hkv, hd); cos/sin (B, L, 1, hd). rotate_half(x) * sin == roll(x, hd/2) * (sign * sin)."""
        return torch.addcmul(qk * cos, qk.roll(self.head_dim // 2, -1), sin)

    def _embed(self, ids):
        e = self.model.model.embed_tokens
        return F.embedding(ids, e.weight, e.padding_idx)  # padding_idx: no gradient into the pad row, as in HF

    def _norm(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.model.model.norm.weight, self.eps)

    def _head(self, x):
        return F.linear(self._norm(x), self.model.lm_head.weight)

    def _sdpa(self, q, k, v, mask, causal=False):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, scale=self.scale, enable_gqa=self.gqa
        )

    @staticmethod
    def _project(h, proj):
        outs = [F.linear(h, w, b) for w, b in proj]
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)

    def _block(self, x, p, cos, sin, attend, rows: int | None = None):
        """One decoder layer; ``attend(q, k, v)`` -> (B, H, Lq, hd) does the attention (full or cached).

        ``rows``: only the last ``rows`` positions go on past the keys/values (the last layer of a forward
        whose other outputs nobody reads); their values are the same.
        """
        w_in, qkv, (w_o, b_o), w_post, gu, (w_down, b_down) = p
        B, L, d = x.shape
        H, Hk, hd = self.heads, self.kv_heads, self.head_dim
        h = F.rms_norm(x, (d,), w_in, self.eps)
        qk, v = self._project(h, qkv).split(((H + Hk) * hd, Hk * hd), dim=-1)  # one cat in backward
        q, k = self._rope(qk.view(B, L, H + Hk, hd), cos, sin).split((H, Hk), dim=2)
        if rows is not None and rows < L:
            q, x = q[:, -rows:], x[:, -rows:]
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.view(B, L, Hk, hd).transpose(1, 2)
        o = attend(q, k, v).transpose(1, 2).reshape(B, x.shape[1], H * hd)
        x = x + F.linear(o, w_o, b_o)
        h = F.rms_norm(x, (d,), w_post, self.eps)
        g, u = self._project(h, gu).chunk(2, dim=-1)
        return x + F.linear(F.silu(g) * u, w_down, b_down)

    # ------------------------------------------------------------------------------------ shared prefix
    def _prefix_split(self, ids: torch.Tensor, att: torch.Tensor, keep: int | None):
        """Rows ``[left pad][tokens][right pad]`` that start with the same C >= MIN_SHARED tokens (a chat
        template's system turn, the worked examples): (prefix (C,), window start, window attention mask).

        The prefix is computed once; every row's remainder is the window ``ids[:, start:]``, where a row's own
        prefix copy (and its padding) is masked out. Positions whose outputs are read (the last ``keep``) are
        never in the prefix. None when nothing worth sharing."""
        B, L = ids.shape
        if B < 2:
            return None
        att = att.bool()
        starts = (~att).long().cumprod(-1).sum(-1)  # left-padding length of each row
        lens = att.long().sum(-1)
        limit = int((L - (keep if keep is not None else L) - starts).min())  # prefix columns never read
        limit = min(limit, int(lens.min()) - 1)
        if limit < MIN_SHARED:
            return None
        j = torch.arange(limit, device=ids.device)
        aligned = ids.gather(1, (starts[:, None] + j[None]).clamp(max=L - 1))
        same = (aligned == aligned[:1]).all(0)
        C = int(same.long().cumprod(0).sum())
        if C < MIN_SHARED:
            return None
        first = int(starts.min()) + C  # the window: every column that is not prefix in every row
        col = torch.arange(first, L, device=ids.device)
        win_att = att[:, first:] & (col[None, :] >= (starts + C)[:, None])
        return aligned[0, :C], first, win_att

    def _shared_forward(self, ids, att, keep, split, layers, on_kv=None):
        """Hidden states (before the final norm) of the last ``keep`` window positions, the common prefix run
        once (its keys/values expanded to every row). ``on_kv(i, k_prefix, v_prefix, k_win, v_win)``: cache hook."""
        prefix, first, win_att = split
        emb_w = self.model.model.embed_tokens.weight
        B, L = ids.shape
        C, R = prefix.shape[0], L - first
        pos = (att.long().cumsum(-1) - 1).clamp(min=0)[:, first:]
        cos_t, sin_t = self._rope_tables(emb_w.device, emb_w.dtype, L)
        cos_c, sin_c = cos_t[:C][None, :, None], sin_t[:C][None, :, None]
        cos_r, sin_r = cos_t[pos][:, :, None], sin_t[pos][:, :, None]
        idx = torch.arange(R, device=ids.device)
        eye = torch.eye(R, dtype=torch.bool, device=ids.device)[None]
        own = ((idx[None, :] <= idx[:, None])[None] & win_att[:, None, :]) | eye
        mask = torch.cat([torch.ones((B, R, C), dtype=torch.bool, device=ids.device), own], -1)[:, None]
        x_c, x_r = self._embed(prefix[None]), self._embed(ids[:, first:])
        n = len(layers)

        def layer(i, x_c, x_r):
            kv = {}

            def attend_c(q, k, v):
                kv["k"], kv["v"] = k, v
                return self._sdpa(q, k, v, None, causal=q.shape[2] == C)  # a single last row sees every key

            def attend_r(q, k, v):
                kc, vc = kv["k"].expand(B, -1, -1, -1), kv["v"].expand(B, -1, -1, -1)
                if on_kv is not None:
                    on_kv(i, kc, vc, k, v)
                m = mask if q.shape[2] == R else mask[:, :, -q.shape[2] :]
                return self._sdpa(q, torch.cat([kc, k], 2), torch.cat([vc, v], 2), m)

            last = i == n - 1
            x_c = self._block(x_c, layers[i], cos_c, sin_c, attend_c, rows=1 if last else None)
            return x_c, self._block(x_r, layers[i], cos_r, sin_r, attend_r, rows=keep if last else None)

        for i in range(n):
            x_c, x_r = self._checkpointed(layer, i, x_c, x_r)
        return x_r if keep is None else x_r[:, -keep:]

    def _checkpointed(self, fn, *args):
        """``fn(*args)``, recomputed in the backward instead of keeping its activations when ``checkpoint``."""
        if self.checkpoint and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(fn, *args, use_reentrant=False)
        return fn(*args)

    # ------------------------------------------------------------------------------------ full forward
    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int | None = None) -> torch.Tensor:
        """(B, keep, d) final hidden states (after the last norm, before the LM head) of the last ``keep``
        positions (all when None); left padding (and right padding) allowed; a common prefix runs once."""
        layers = self._train_layers()
        split = self._prefix_split(input_ids, attention_mask, keep) if self.share_prefix else None
        if split is not None:
            return self._norm(self._shared_forward(input_ids, attention_mask, keep, split, layers))
        emb_w = self.model.model.embed_tokens.weight
        B, L = input_ids.shape
        att = attention_mask.bool()
        pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        cos_t, sin_t = self._rope_tables(emb_w.device, emb_w.dtype, L)
        cos, sin = cos_t[pos][:, :, None], sin_t[pos][:, :, None]
        idx = torch.arange(L, device=input_ids.device)
        causal = idx[None, :] <= idx[:, None]
        mask = (causal[None] & att[:, None, :]) | torch.eye(L, dtype=torch.bool, device=input_ids.device)[None]
        mask = mask[:, None]  # (B, 1, L, L)

        def attend(q, k, v):
            return self._sdpa(q, k, v, mask if q.shape[2] == L else mask[:, :, -q.shape[2] :])

        def layer(i, x):
            return self._block(x, layers[i], cos, sin, attend, rows=keep if i == len(layers) - 1 else None)

        x = self._embed(input_ids)
        for i in range(len(layers)):
            x = self._checkpointed(layer, i, x)
        if keep is not None:
            x = x[:, -keep:]
        return self._norm(x)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int | None = None) -> torch.Tensor:
        """(B, keep, V) logits of the last ``keep`` positions (all when None); left padding allowed."""
        return F.linear(self.hidden(input_ids, attention_mask, keep), self.model.lm_head.weight)

    # ------------------------------------------------------------------------------------ generation
    @torch.no_grad()
    def start(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        max_new_tokens: int,
        expand: torch.Tensor | None = None,
    ):
        """Prefill a preallocated KV cache with the (left-padded) prompts; returns (state, last logits (B, V)).

        ``expand`` (B,) maps each generated row to a prompt row: a prompt shared by n samples is run once.
        """
        emb_w = self.model.model.embed_tokens.weight
        dev = input_ids.device
        n, P = input_ids.shape
        Hk, hd = self.kv_heads, self.head_dim
        layers = self._layers()
        B = n if expand is None else expand.shape[0]
        # every cache slot is written before it is read (prompt now, position P+t at step t): no zero fill
        cache = torch.empty((len(layers), 2, B, Hk, P + max_new_tokens, hd), dtype=emb_w.dtype, device=dev)
        pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        cos_t, sin_t = self._rope_tables(emb_w.device, emb_w.dtype, P + max_new_tokens)

        def store(i, k, v):
            cache[i, 0, :, :, :P] = k if expand is None else k[expand]
            cache[i, 1, :, :, :P] = v if expand is None else v[expand]

        split = self._prefix_split(input_ids, attention_mask, 1) if self.share_prefix else None
        if split is not None:  # the common prefix once: its keys/values go into every row's columns
            C, first = split[0].shape[0], split[1]
            starts = (~attention_mask.bool()).long().cumprod(-1).sum(-1)
            b_idx = torch.arange(n, device=dev)[:, None].expand(n, C)
            c_idx = starts[:, None] + torch.arange(C, device=dev)[None]

            def on_kv(i, kc, vc, k, v):
                full = []
                for pre, win in ((kc, k), (vc, v)):
                    t = win.new_zeros((n, Hk, P, hd))  # left padding: finite, never attended
                    t[:, :, first:] = win
                    t[b_idx, :, c_idx] = pre.transpose(1, 2)  # over the window's masked copies of the prefix
                    full.append(t)
                store(i, *full)

            x = self._shared_forward(input_ids, attention_mask, 1, split, layers, on_kv=on_kv)
        else:
            idx = torch.arange(P, device=dev)
            eye = torch.eye(P, dtype=torch.bool, device=dev)[None]
            mask = (((idx[None, :] <= idx[:, None])[None] & attention_mask.bool()[:, None, :]) | eye)[:, None]
            x = self._embed(input_ids)
            cos, sin = cos_t[pos][:, :, None], sin_t[pos][:, :, None]
            for i, p in enumerate(layers):

                def attend(q, k, v, i=i):
                    store(i, k, v)
                    return self._sdpa(q, k, v, mask if q.shape[2] == P else mask[:, :, -q.shape[2] :])

                x = self._block(x, p, cos, sin, attend, rows=1 if i == len(layers) - 1 else None)
        logits = self._head(x[:, -1])
        if expand is not None:
            logits, attention_mask, pos = logits[expand], attention_mask[expand], pos[expand]
        att = torch.ones((B, P + max_new_tokens), dtype=torch.bool, device=dev)
        att[:, :P] = attention_mask.bool()  # generated positions are always attended (as in the HF loop)
        state = {"layers": layers, "cache": cache, "att": att, "len": P, "pos": pos[:, -1], "tables": (cos_t, sin_t)}
        return state, logits

    def cache_bytes(self, width: int) -> int:
        """Bytes of one row's KV cache over ``width`` positions."""
        w = self.model.model.embed_tokens.weight
        return len(self.model.model.layers) * 2 * self.kv_heads * width * self.head_dim * w.element_size()

    @staticmethod
    def compact(state: dict, keep: torch.Tensor) -> None:
        """Keep only the rows ``keep`` of a generation state (finished rows stop costing compute)."""
        state["cache"] = state["cache"][:, :, keep]
        state["att"], state["pos"] = state["att"][keep], state["pos"][keep]

    @torch.no_grad()
    def step(self, state: dict, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row (B,) to the cache; returns the next logits (B, V)."""
        cache, n = state["cache"], state["len"]
        state["pos"] = state["pos"] + 1
        cos_t, sin_t = state["tables"]
        pos = state["pos"][:, None]
        cos, sin = cos_t[pos][:, :, None], sin_t[pos][:, :, None]
        mask = state["att"][:, None, None, : n + 1]

        x = self._embed(tokens[:, None])
        for i, p in enumerate(state["layers"]):

            def attend(q, k, v, i=i):
                cache[i, 0, :, :, n : n + 1] = k
                cache[i, 1, :, :, n : n + 1] = v
                return self._sdpa(q, cache[i, 0, :, :, : n + 1], cache[i, 1, :, :, : n + 1], mask)

            x = self._block(x, p, cos, sin, attend)
        state["len"] = n + 1
        return self._head(x[:, 0])


FastQwen2 = FastDecoder  # the name before Llama support
