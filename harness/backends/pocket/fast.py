"""A lean forward for Qwen2 decoders that reads the HF module's own parameters (training updates the real model).

The transformers forward is the reference (tests/pocket/test_fast.py holds this one to it within 1e-5); this
one computes the same function with fewer and larger tensor ops, which is what sets the pace at pocket widths
(64-128), where element-wise/attention kernels and per-op overhead cost as much as the matmuls. What differs
from the HF code, numerically only:
  * q/k/v (and gate/up) projections are one matmul over concatenated weights (same products, other blocking);
  * RMSNorm is ``torch.nn.functional.rms_norm`` (one fused op instead of five);
  * rotate_half is a roll by half the head with the sign folded into the sin table (exact);
  * padding query rows attend to themselves instead of nothing (their outputs are never used; this keeps
    them finite, so no NaN reaches a gradient);
  * generation writes keys/values into a preallocated cache instead of concatenating a growing one, and a
    prompt shared by several samples is prefilled once;
  * the last layer runs only the positions whose outputs are read (``rows``/``keep``).
Only what the pocket sizes use is supported (see ``supports``); anything else runs the HF forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def supports(model) -> bool:
    """True for a Qwen2ForCausalLM this module computes exactly (plain RoPE, MHA, SiLU, no sliding window)."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "qwen2" or not hasattr(model, "model"):
        return False
    rope = getattr(cfg, "rope_parameters", None) or {}
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return (
        cfg.num_key_value_heads == cfg.num_attention_heads
        and cfg.hidden_act == "silu"
        and rope.get("rope_type", "default") == "default"
        and not getattr(cfg, "use_sliding_window", False)
        and head_dim * cfg.num_attention_heads == cfg.hidden_size
        and head_dim % 2 == 0
        and float(getattr(cfg, "attention_dropout", 0.0)) == 0.0
        and set(getattr(cfg, "layer_types", None) or ["full_attention"]) == {"full_attention"}
    )


class FastQwen2:
    """Forward passes over ``model``'s parameters; build once per model (holds RoPE tables only)."""

    def __init__(self, model):
        if not supports(model):
            raise ValueError("FastQwen2: unsupported model configuration (see fast.supports)")
        cfg = model.config
        self.model = model
        self.heads = cfg.num_attention_heads
        self.head_dim = cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim**-0.5
        rot = model.model.rotary_emb
        self._inv_freq = rot.inv_freq.detach().float().cpu()
        self._rope_scale = rot.attention_scaling
        self._n_pos = 0
        self._tables = {}
        self._build_tables(max(int(cfg.max_position_embeddings), 1))

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

    def _layers(self):
        """Per layer: (in-norm w, fused qkv W, fused qkv b, o W, post-norm w, fused gate/up W, down W)."""
        out = []
        for layer in self.model.model.layers:
            a, m = layer.self_attn, layer.mlp
            out.append(
                (
                    layer.input_layernorm.weight,
                    torch.cat((a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)),
                    torch.cat((a.q_proj.bias, a.k_proj.bias, a.v_proj.bias)),
                    a.o_proj.weight,
                    layer.post_attention_layernorm.weight,
                    torch.cat((m.gate_proj.weight, m.up_proj.weight)),
                    m.down_proj.weight,
                )
            )
        return out

    def _rope(self, qk, cos, sin):
        """qk (B, L, 2H, hd); cos/sin (B, L, 1, hd). rotate_half(x) * sin == roll(x, hd/2) * (sign * sin)."""
        return torch.addcmul(qk * cos, qk.roll(self.head_dim // 2, -1), sin)

    def _embed(self, ids):
        e = self.model.model.embed_tokens
        return F.embedding(ids, e.weight, e.padding_idx)  # padding_idx: no gradient into the pad row, as in HF

    def _head(self, x):
        m = self.model
        x = F.rms_norm(x, (x.shape[-1],), m.model.norm.weight, self.eps)
        return F.linear(x, m.lm_head.weight, m.lm_head.bias)

    def _block(self, x, p, cos, sin, attend, rows: int | None = None):
        """One decoder layer; ``attend(q, k, v)`` -> (B, H, Lq, hd) does the attention (full or cached).

        ``rows``: only the last ``rows`` positions go on past the keys/values (the last layer of a forward
        whose other outputs nobody reads); their values are the same.
        """
        w_in, w_qkv, b_qkv, w_o, w_post, w_gu, w_down = p
        B, L, d = x.shape
        H, hd = self.heads, self.head_dim
        h = F.rms_norm(x, (d,), w_in, self.eps)
        qk, v = F.linear(h, w_qkv, b_qkv).split((2 * d, d), dim=-1)  # split: one cat in backward, no zero-fills
        q, k = self._rope(qk.view(B, L, 2 * H, hd), cos, sin).split(H, dim=2)
        if rows is not None and rows < L:
            q, x = q[:, -rows:], x[:, -rows:]
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.view(B, L, H, hd).transpose(1, 2)
        o = attend(q, k, v).transpose(1, 2).reshape(B, x.shape[1], d)
        x = x + F.linear(o, w_o)
        h = F.rms_norm(x, (d,), w_post, self.eps)
        g, u = F.linear(h, w_gu).chunk(2, dim=-1)
        return x + F.linear(F.silu(g) * u, w_down)

    # ------------------------------------------------------------------------------------ full forward
    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int | None = None) -> torch.Tensor:
        """(B, keep, V) logits of the last ``keep`` positions (all when None); left padding allowed."""
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
            m = mask if q.shape[2] == L else mask[:, :, -q.shape[2] :]
            return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=self.scale)

        x = self._embed(input_ids)
        layers = self._layers()
        for i, p in enumerate(layers):
            x = self._block(x, p, cos, sin, attend, rows=keep if i == len(layers) - 1 else None)
        if keep is not None:
            x = x[:, -keep:]
        return self._head(x)

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
        H, hd = self.heads, self.head_dim
        layers = self._layers()
        B = n if expand is None else expand.shape[0]
        # every cache slot is written before it is read (prompt now, position P+t at step t): no zero fill
        cache = torch.empty((len(layers), 2, B, H, P + max_new_tokens, hd), dtype=emb_w.dtype, device=dev)
        pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        cos_t, sin_t = self._rope_tables(emb_w.device, emb_w.dtype, P + max_new_tokens)
        idx = torch.arange(P, device=dev)
        eye = torch.eye(P, dtype=torch.bool, device=dev)[None]
        mask = (((idx[None, :] <= idx[:, None])[None] & attention_mask.bool()[:, None, :]) | eye)[:, None]
        x = self._embed(input_ids)
        cos, sin = cos_t[pos][:, :, None], sin_t[pos][:, :, None]
        for i, p in enumerate(layers):

            def attend(q, k, v, i=i):
                cache[i, 0, :, :, :P] = k if expand is None else k[expand]
                cache[i, 1, :, :, :P] = v if expand is None else v[expand]
                m = mask if q.shape[2] == P else mask[:, :, -q.shape[2] :]
                return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=self.scale)

            x = self._block(x, p, cos, sin, attend, rows=1 if i == len(layers) - 1 else None)
        logits = self._head(x[:, -1])
        if expand is not None:
            logits, attention_mask, pos = logits[expand], attention_mask[expand], pos[expand]
        att = torch.ones((B, P + max_new_tokens), dtype=torch.bool, device=dev)
        att[:, :P] = attention_mask.bool()  # generated positions are always attended (as in the HF loop)
        state = {"layers": layers, "cache": cache, "att": att, "len": P, "pos": pos[:, -1], "tables": (cos_t, sin_t)}
        return state, logits

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
                return F.scaled_dot_product_attention(
                    q, cache[i, 0, :, :, : n + 1], cache[i, 1, :, :, : n + 1], attn_mask=mask, scale=self.scale
                )

            x = self._block(x, p, cos, sin, attend)
        state["len"] = n + 1
        return self._head(x[:, 0])
