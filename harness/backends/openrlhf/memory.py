"""Per-GPU memory plan of an OpenRLHF run, and the rule that picks ZeRO stage, Adam offload and vLLM TP.

An estimate from the model's shape, not a measurement: every term is a documented formula (docs/gpu.md,
"Memory plans"). ``resolve`` turns the ``openrlhf:`` options (``auto`` where the rule should choose) into concrete
settings and a ``Plan``, and refuses a run whose plan does not fit the stated GPU memory. Memory is counted in
GiB (2**30 bytes): what an "80 GB" A100/H100 holds. Pure Python, nothing imported from OpenRLHF.

Phases checked against the GPU (OpenRLHF 0.11.2, colocated hybrid engine with sleep mode):
  train     DeepSpeed actor fit; vLLM asleep (weights on the host, KV cache freed)
  rollout   the old-log-prob forward of make_experience; DeepSpeed's optimizer states asleep when colocated
  generate  vLLM awake with its whole budget (gpu_memory_utilization x GPU memory) next to the actor's bf16
            weights, which DeepSpeed's sleep keeps on the GPU (it offloads optimizer states, fp32 master
            weights and gradients, not the low-precision parameters)
and inside vLLM's budget: its weights / TP, an allowance for activations and CUDA graphs, and a KV cache that
must hold at least one sequence of ``max_prompt_len + max_new_tokens`` tokens (vLLM refuses to start otherwise).
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from harness.backends.openrlhf.options import OpenRLHFConfigError

GiB = 2**30
ADAM_BYTES = 12  # per parameter: fp32 master weights + Adam m and v
RESERVE_GIB = 4.0  # allowance, not measured: CUDA contexts (DeepSpeed + vLLM), NCCL, DeepSpeed buckets, fragmentation
VLLM_OTHER_GIB = 2.0  # allowance inside vLLM's budget, not measured: its activation peak and CUDA graphs
# bytes per logit (micro-batch x sequence x vocabulary) at the training step's peak:
#   none     fp32 logits (4) + their fp32 gradient (4) + its bf16 copy (2)
#   forward  + the entropy's softmax (4), kept by the entropy's graph until the step ends (log_entropy)
#   grad     the entropy in the loss: fp32 logits, softmax, gradient accumulator and two backward temporaries (5 x 4)
TRAIN_LOGIT_BYTES = {"none": 10, "forward": 14, "grad": 20}
# the no-grad old-log-prob forward: bf16 + fp32 logits (6); with the entropy fp32 logits, softmax, product (12)
ROLLOUT_LOGIT_BYTES = {"none": 6, "forward": 12, "grad": 12}
AUTO = "auto"


# ------------------------------------------------------------------------------------------- architecture
@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer's shape (HF config.json names in the comments)."""

    name: str
    source: str  # where the numbers come from
    params: int
    layers: int  # num_hidden_layers
    hidden: int  # hidden_size
    heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads
    head_dim: int  # head_dim, else hidden_size / num_attention_heads
    intermediate: int  # intermediate_size
    vocab: int  # vocab_size
    tied: bool  # tie_word_embeddings

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (what ZeRO-3 gathers at a time)."""
        outside = self.embedding_params * (1 if self.tied else 2) + self.hidden
        return max(self.params - outside, 0) // max(self.layers, 1)

    def kv_bytes_per_token(self, tp: int, dtype_bytes: int = 2) -> int:
        """K and V of one token on one GPU of a TP group: 2 x layers x ceil(kv_heads / tp) x head_dim x bytes."""
        return 2 * self.layers * math.ceil(self.kv_heads / tp) * self.head_dim * dtype_bytes


# Qwen2.5 base models (the -Instruct models share the shape). Checked offline against third-party verbatim copies
# of the public config.json files (0.5B, 3B, 7B, 14B, 32B, 72B-Instruct) and of the 1.5B's values; the counts that
# param_count() gives equal metadata.total_size / 2 of the published safetensors indexes for 7B (15,231,233,024 B),
# 32B (65,527,752,704 B) and 72B-Instruct (145,412,407,296 B), and lie within 0.01B of the model cards' 0.5B-7B figures.
# (hidden, layers, heads, kv_heads, intermediate, vocab, tied); Qwen2 attention has q/k/v biases.
QWEN25 = {
    "0.5B": (896, 24, 14, 2, 4864, 151936, True),
    "1.5B": (1536, 28, 12, 2, 8960, 151936, True),
    "3B": (2048, 36, 16, 2, 11008, 151936, True),
    "7B": (3584, 28, 28, 4, 18944, 152064, False),
    "14B": (5120, 48, 40, 8, 13824, 152064, False),
    "32B": (5120, 64, 40, 8, 27648, 152064, False),
    "72B": (8192, 80, 64, 8, 29568, 152064, False),
}
_QWEN25_ID = re.compile(r"(?:Qwen/)?Qwen2\.5-(0\.5B|1\.5B|3B|7B|14B|32B|72B)(?:-Instruct)?")


def param_count(config: dict) -> int:
    """Parameters of a Llama/Qwen2-style decoder from its HF config (SwiGLU MLP, RMSNorm)."""
    h, layers, heads = config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    hd = config.get("head_dim") or h // heads
    inter, vocab = config["intermediate_size"], config["vocab_size"]
    qkv_bias = config.get("model_type") == "qwen2" or bool(config.get("attention_bias"))
    o_bias = bool(config.get("attention_bias"))
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    attn += (heads * hd + 2 * kv * hd if qkv_bias else 0) + (h if o_bias else 0)
    mlp = 3 * h * inter + (2 * inter + h if config.get("mlp_bias") else 0)
    per_layer = attn + mlp + 2 * h  # + input and post-attention RMSNorm
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings", False) else 2)
    return layers * per_layer + h + embeddings


def from_config(name: str, config: dict, source: str, params: int | None = None) -> Architecture:
    heads = config["num_attention_heads"]
    return Architecture(
        name=name,
        source=source,
        params=params if params is not None else param_count(config),
        layers=config["num_hidden_layers"],
        hidden=config["hidden_size"],
        heads=heads,
        kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        intermediate=config["intermediate_size"],
        vocab=config["vocab_size"],
        tied=bool(config.get("tie_word_embeddings", False)),
    )


def safetensors_params(directory: Path) -> int | None:
    """Exact parameter count from the headers of the ``*.safetensors`` files in ``directory`` (None if none)."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with open(path, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return total


def architecture(model: str) -> Architecture | None:
    """The shape of ``model``: a local directory's config.json (parameters counted from its safetensors when
    present), the built-in Qwen2.5 table, or config.json in the local Hugging Face cache; None when unknown."""
    path = Path(model)
    if path.is_dir():
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            return None
        config = json.loads(cfg_path.read_text())
        config = config.get("text_config", config) if "hidden_size" not in config else config
        try:
            counted = safetensors_params(path)
            source = f"{cfg_path}" + (" + safetensors headers" if counted is not None else "")
            return from_config(model, config, source, counted)
        except (KeyError, TypeError):
            return None
    match = _QWEN25_ID.fullmatch(model)
    if match:
        h, layers, heads, kv, inter, vocab, tied = QWEN25[match.group(1)]
        config = dict(
            model_type="qwen2",
            hidden_size=h,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            intermediate_size=inter,
            vocab_size=vocab,
            tie_word_embeddings=tied,
        )
        return from_config(model, config, f"built-in table (Qwen2.5-{match.group(1)})")
    return _from_hf_cache(model)


def _from_hf_cache(model: str) -> Architecture | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001 (a malformed repo id: not in the cache)
        return None
    if not isinstance(found, str):
        return None
    try:
        return from_config(model, json.loads(Path(found).read_text()), f"Hugging Face cache ({found})")
    except (KeyError, TypeError, ValueError):
        return None


# ------------------------------------------------------------------------------------------------ arithmetic
@dataclass(frozen=True)
class Layout:
    """Everything besides the model that sets the memory per GPU."""

    nodes: int
    gpus_per_node: int
    gpu_gib: float
    zero_stage: int
    adam_offload: bool
    vllm_tp: int
    colocate: bool
    vllm_util: float  # vLLM gpu_memory_utilization
    micro: int  # train micro-batch (sequences per GPU)
    rollout_micro: int  # old-log-prob forward micro-batch
    seq_len: int  # max_prompt_len + max_new_tokens (padded micro-batch length, worst case)
    gradient_checkpointing: bool = True
    max_tokens_per_gpu: int | None = None  # dynamic batching's token budget (micro-batch_tokens)
    entropy: str = "forward"  # none | forward | grad (see TRAIN_LOGIT_BYTES)
    reference: str = "none"  # none | gpu | cpu: the KL reference model's weights
    dtype_bytes: int = 2  # bf16/fp16 parameters

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Phase:
    name: str
    terms: tuple[tuple[str, float], ...]  # (term, bytes)
    limit: float  # bytes
    detail: str = ""

    @property
    def total(self) -> float:
        return sum(v for _, v in self.terms)

    @property
    def fits(self) -> bool:
        return self.total <= self.limit

    def line(self) -> str:
        terms = " + ".join(f"{k} {v / GiB:.1f}" for k, v in self.terms if v)
        mark = "" if self.fits else "  DOES NOT FIT"
        return f"{self.name:<8} {terms} = {self.total / GiB:.1f} / {self.limit / GiB:g} GiB{self.detail}{mark}"


@dataclass(frozen=True)
class VLLMFit:
    budget: float  # bytes: gpu_memory_utilization x GPU memory
    weights: float  # per GPU of an engine
    other: float
    kv: float  # what is left for the KV cache per GPU
    kv_per_token: int  # per GPU of an engine
    seq_len: int

    @property
    def tokens(self) -> int:
        """Tokens one engine's KV cache holds (each GPU of a TP group holds its heads of the same tokens)."""
        return max(int(self.kv // self.kv_per_token), 0)

    @property
    def fits(self) -> bool:
        return self.tokens >= self.seq_len


@dataclass(frozen=True)
class Plan:
    arch: Architecture
    layout: Layout
    phases: tuple[Phase, ...]
    vllm: VLLMFit
    host_gib_per_node: float

    @property
    def fits(self) -> bool:
        return all(p.fits for p in self.phases) and self.vllm.fits

    def phase(self, name: str) -> Phase:
        return next(p for p in self.phases if p.name == name)

    def failures(self) -> str:
        """The phases (and vLLM's KV cache) that do not fit, with each term."""
        out = [p.line() for p in self.phases if not p.fits]
        if not self.vllm.fits:
            v = self.vllm
            out.append(
                f"vLLM KV cache {v.kv / GiB:.1f} GiB per GPU = {v.tokens} tokens < one sequence of {v.seq_len} "
                f"(budget {v.budget / GiB:.1f} - weights {v.weights / GiB:.1f} - other {v.other / GiB:.1f})"
            )
        return "; ".join(out)


def micro_batch_tokens(micro: int, seq_len: int, max_tokens_per_gpu: int | None = None) -> int:
    """Tokens of the largest micro-batch a GPU forwards: ``micro`` sequences padded to ``seq_len``, or with dynamic
    batching (packed) the token budget, or one sequence longer than it (it gets a micro-batch of its own). OpenRLHF
    balances the budget's bins (Karmarkar-Karp), which can overshoot the budget by part of a sequence: not counted."""
    if max_tokens_per_gpu is None:
        return micro * seq_len
    return max(int(max_tokens_per_gpu), seq_len)


def _tokens_detail(micro: int, seq_len: int, max_tokens_per_gpu: int | None) -> str:
    if max_tokens_per_gpu is None:
        return f"  ({micro} x {seq_len} tokens)"
    return f"  ({micro_batch_tokens(micro, seq_len, max_tokens_per_gpu)} tokens, dynamic batch)"


def vllm_fit(arch: Architecture, tp: int, util: float, gpu_gib: float, seq_len: int, dtype_bytes: int = 2) -> VLLMFit:
    """One vLLM engine of ``tp`` GPUs: its budget ``util x gpu_gib`` per GPU, its weight shard ``w P / tp``, the
    allowance for activations and CUDA graphs, and what is left for the KV cache (rollout and evaluation alike)."""
    budget = util * gpu_gib * GiB
    weights = dtype_bytes * arch.params / tp
    other = VLLM_OTHER_GIB * GiB
    return VLLMFit(budget, weights, other, budget - weights - other, arch.kv_bytes_per_token(tp, dtype_bytes), seq_len)


def estimate(arch: Architecture, lay: Layout) -> Plan:
    """The per-GPU bytes of every phase (formulas in docs/gpu.md, "Memory plans")."""
    p, w, dp, limit = arch.params, lay.dtype_bytes, lay.world, lay.gpu_gib * GiB
    z3 = lay.zero_stage == 3
    weights = w * p / (dp if z3 else 1)
    gathered = 2 * w * max(arch.layer_params, arch.embedding_params) if z3 else 0  # layer in use + prefetched
    grads = w * p / (dp if lay.zero_stage >= 2 else 1)
    optimizer_states = ADAM_BYTES * p / (dp if lay.zero_stage >= 1 else 1)
    optimizer = 0.0 if lay.adam_offload else optimizer_states
    reference = w * p / (dp if z3 else 1) if lay.reference == "gpu" else 0.0
    reserve = RESERVE_GIB * GiB
    per_token_layer = 6 * arch.hidden + 2 * arch.kv_heads * arch.head_dim + 4 * arch.intermediate  # saved values
    tokens = micro_batch_tokens(lay.micro, lay.seq_len, lay.max_tokens_per_gpu)
    rollout_tokens = micro_batch_tokens(lay.rollout_micro, lay.seq_len, lay.max_tokens_per_gpu)
    layer = w * tokens * per_token_layer
    if lay.gradient_checkpointing:
        checkpoints = arch.layers * tokens * arch.hidden * w
        layers = 2 * layer  # the recomputed layer's saved tensors + as much again for their gradients
    else:
        checkpoints, layers = 0.0, (arch.layers + 1) * layer
    logits = tokens * arch.vocab * TRAIN_LOGIT_BYTES[lay.entropy]
    train = Phase(
        "train",
        (
            ("weights", weights),
            ("gathered", gathered),
            ("grads", grads),
            ("optimizer", optimizer),
            ("checkpoints", checkpoints),
            ("layers", layers),
            ("logits", logits),
            ("reference", reference),
            ("reserve", reserve),
        ),
        limit,
        _tokens_detail(lay.micro, lay.seq_len, lay.max_tokens_per_gpu),
    )
    asleep = lay.colocate  # DeepSpeed sleep: optimizer states and gradients on the host outside fit()
    rollout = Phase(
        "rollout",
        (
            ("weights", weights),
            ("gathered", gathered),
            ("grads", 0.0 if asleep else grads),
            ("optimizer", 0.0 if asleep else optimizer),
            ("layer", w * rollout_tokens * per_token_layer),
            ("logits", rollout_tokens * arch.vocab * ROLLOUT_LOGIT_BYTES[lay.entropy]),
            ("reference", reference),
            ("reserve", reserve),
        ),
        limit,
        _tokens_detail(lay.rollout_micro, lay.seq_len, lay.max_tokens_per_gpu),
    )
    fit = vllm_fit(arch, lay.vllm_tp, lay.vllm_util, lay.gpu_gib, lay.seq_len, w)
    budget, vllm_weights, other = fit.budget, fit.weights, fit.other
    detail = (
        f"  (vLLM: weights {vllm_weights / GiB:.1f} + other {other / GiB:.1f} + KV {max(fit.kv, 0) / GiB:.1f}"
        f" = {fit.tokens} tokens per engine = {fit.tokens // lay.seq_len} sequences of {lay.seq_len})"
    )
    generate = Phase(
        "generate",
        (
            ("actor weights", weights if lay.colocate else 0.0),
            ("reference", reference if lay.colocate else 0.0),
            ("vLLM", budget),
            ("reserve", reserve),
        ),
        limit,
        detail,
    )
    on_host = optimizer_states if (lay.adam_offload or lay.colocate) else 0.0
    on_host += vllm_weights if lay.colocate else 0.0  # vLLM sleep level 1 keeps its weights on the host
    return Plan(arch, lay, (train, rollout, generate), fit, on_host * lay.gpus_per_node / GiB)


# ------------------------------------------------------------------------------------------------ the rule
@dataclass(frozen=True)
class Resolved:
    """The concrete settings for the launch command, the plan behind them, and how they were chosen."""

    zero_stage: int
    adam_offload: bool
    vllm_tp: int
    plan: Plan | None  # None: the architecture is unknown, nothing was checked
    how: str

    def lines(self) -> list[str]:
        head = "memory plan (estimate per GPU; docs/gpu.md 'Memory plans')"
        if self.plan is None:
            return [f"{head}: {self.how}"]
        a, lay = self.plan.arch, self.plan.layout
        out = [
            f"{head}: {a.name} {a.params / 1e9:.2f}B params ({a.source}), {lay.nodes} x {lay.gpus_per_node} GPUs "
            f"of {lay.gpu_gib:g} GiB",
            f"  {self.how}",
            *(f"  {p.line()}" for p in self.plan.phases),
            f"  host     {self.plan.host_gib_per_node:.0f} GiB per node (optimizer states offloaded or asleep, "
            f"vLLM weights asleep)",
        ]
        return out


def tp_candidates(arch: Architecture, gpus_per_node: int) -> list[int]:
    """vLLM TP sizes that stay inside a node and split the attention heads evenly (vLLM requires both)."""
    return [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= gpus_per_node and not gpus_per_node % t and not arch.heads % t]


def choose_tp(arch: Architecture, candidates: list[int], budget: float, dtype_bytes: int = 2) -> int:
    """The rule for vLLM TP: the smallest size whose weight shard takes at most half of vLLM's budget (the other
    half at least is KV cache); the largest candidate when none does."""
    for t in candidates:
        if dtype_bytes * arch.params / t <= budget / 2:
            return t
    return candidates[-1]


def deepspeed_candidates(stage, offload) -> list[tuple[int, bool]]:
    """The rule for ZeRO stage and Adam offload, in order of preference (least communication first):
    ZeRO-2, ZeRO-3, ZeRO-2 + offload, ZeRO-3 + offload; a value set by the user stays fixed."""
    stages = [2, 3] if stage == AUTO else [int(stage)]
    offloads = [False, True] if offload == AUTO else [bool(offload)]
    return sorted(((s, o) for s in stages for o in offloads), key=lambda so: (so[1], so[0]))


def resolve(
    opts,
    *,
    model: str,
    micro: int,
    seq_len: int,
    entropy: str,
) -> Resolved:
    """Concrete ZeRO stage, Adam offload and vLLM TP for ``opts`` (``auto`` -> the rule) with the plan behind
    them; OpenRLHFConfigError when the plan cannot fit ``opts.gpu_memory_gb``. ``--ds.adam_offload`` and
    ``--ref.offload`` given in ``extra_flags`` count as set."""
    stage, offload, tp = opts.zero_stage, opts.adam_offload, opts.vllm_tp
    extra = {str(k): v for k, v in opts.extra_flags.items()}
    if "--ds.adam_offload" in extra:
        if offload is not False:
            raise OpenRLHFConfigError(
                "openrlhf.extra_flags: --ds.adam_offload is set by openrlhf.adam_offload (true, false or auto); "
                "remove it from extra_flags"
            )
        offload = bool(extra["--ds.adam_offload"])
    reference = "none" if not opts.kl_coef else "cpu" if extra.get("--ref.offload") else "gpu"
    auto = [k for k, v in (("zero_stage", stage), ("adam_offload", offload), ("vllm_tp", tp)) if v == AUTO]
    arch = architecture(model)
    if arch is None:
        why = f"{model!r} is neither a local model directory with config.json nor a known Qwen2.5 size"
        if auto:
            raise OpenRLHFConfigError(
                f"openrlhf.{auto[0]}: auto needs the model's architecture, but {why}; set "
                f"{', '.join('openrlhf.' + k for k in auto)} explicitly or give a local model directory"
            )
        return Resolved(int(stage), bool(offload), int(tp), None, f"not checked: {why}")
    world = opts.nodes * opts.gpus_per_node
    tps = tp_candidates(arch, opts.gpus_per_node)
    if opts.colocate and opts.vllm_engines is not None:
        tps = [t for t in tps if opts.vllm_engines * t == world] or tps
    if tp != AUTO and (int(tp) > opts.gpus_per_node or arch.heads % int(tp)):
        raise OpenRLHFConfigError(
            f"openrlhf.vllm_tp: {tp} does not split {model}'s {arch.heads} attention heads within a node of "
            f"{opts.gpus_per_node} GPUs (vLLM needs heads % tp == 0); allowed: {', '.join(map(str, tps))} or auto"
        )
    budget = float(opts.vllm_gpu_memory_utilization) * float(opts.gpu_memory_gb) * GiB
    tp = choose_tp(arch, tps, budget) if tp == AUTO else int(tp)
    plan = None
    for s, o in deepspeed_candidates(stage, offload):
        layout = Layout(
            nodes=opts.nodes,
            gpus_per_node=opts.gpus_per_node,
            gpu_gib=float(opts.gpu_memory_gb),
            zero_stage=s,
            adam_offload=o,
            vllm_tp=tp,
            colocate=opts.colocate,
            vllm_util=float(opts.vllm_gpu_memory_utilization),
            micro=micro,
            rollout_micro=opts.rollout_micro_batch_size or micro,
            seq_len=seq_len,
            gradient_checkpointing=opts.gradient_checkpointing,
            max_tokens_per_gpu=opts.max_tokens_per_gpu,
            entropy=entropy,
            reference=reference,
        )
        plan = estimate(arch, layout)
        if plan.fits:
            break
    chosen = f"ZeRO-{plan.layout.zero_stage}, Adam offload {'on' if plan.layout.adam_offload else 'off'}, vLLM TP {tp}"
    how = f"{chosen} ({'rule for ' + ', '.join(auto) if auto else 'as set'})"
    if not plan.fits:
        hint = (
            "no setting of ZeRO stage/offload fits: lower train.micro_batch_size (openrlhf.max_tokens_per_gpu with "
            "dynamic batches) or the sequence length, add "
            "nodes, or raise openrlhf.gpu_memory_gb if the GPUs are larger"
            if len(deepspeed_candidates(stage, offload)) == 4
            else "set openrlhf.zero_stage: auto and openrlhf.adam_offload: auto to let the rule choose, or lower "
            "train.micro_batch_size (openrlhf.max_tokens_per_gpu) / the sequence length"
        )
        raise OpenRLHFConfigError(
            f"openrlhf: the memory plan does not fit {opts.gpu_memory_gb:g} GiB per GPU (estimate, docs/gpu.md "
            f"'Memory plans'; {model}, {arch.params / 1e9:.2f}B params, {opts.nodes} x {opts.gpus_per_node} GPUs, "
            f"{chosen}): {plan.failures()}. {hint}"
        )
    return Resolved(plan.layout.zero_stage, plan.layout.adam_offload, tp, plan, how)
