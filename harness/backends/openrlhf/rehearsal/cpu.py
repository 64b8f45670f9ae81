"""The CPU rehearsal (``openrlhf.rehearsal: true``): OpenRLHF 0.11.2's own trainer loop on a machine without a GPU.

Everything upstream runs as on a cluster — ``train_ppo_ray.train``, Ray placement groups, ``PPOTrainer.fit``,
``SamplesGenerator``, upstream's ``RolloutRayActor`` and ``SingleTurnAgentExecutor`` (our reward function),
``RemoteExperienceMaker``, ``PolicyModelActor`` with a real DeepSpeed engine (ZeRO, bf16, its optimizer and its
checkpoints, on DeepSpeed's CPU accelerator over gloo), eval, checkpoint and resume, the final HF model — except
what cannot run without CUDA. The stand-ins, each as small as it can be (docs/gpu.md lists them with reasons):

1. vLLM's ``AsyncLLMEngine`` -> :class:`CpuRolloutEngine`: Hugging Face ``generate`` on the CPU behind the engine
   calls upstream's ``RolloutRayActor`` makes (``generate``, ``sleep``/``wake_up``, ``is_sleeping``,
   ``get_num_unfinished_requests``, ``reset_prefix_cache``); concurrent requests are batched.
2. The policy -> vLLM weight sync (``ActorPPOTrainer.broadcast_to_vllm``: NCCL broadcast or CUDA IPC handles) ->
   :func:`sync_weights_to_engines`: rank 0 sends the (gathered) parameters to every engine through Ray.
3. CUDA calls hard-coded in upstream: ``torch.cuda.current_device`` -> ``"cpu"``, ``torch.cuda.synchronize`` /
   ``set_device`` -> no-ops, ``init_device_mesh("cuda", ...)`` -> a CPU mesh, ``NaiveReplayBuffer``'s
   ``cuda:<n>`` target device -> the CPU.
4. Ray: logical GPUs (``ray.init(num_gpus=N)``) so upstream's ``{"GPU": 1}`` placement groups are satisfiable.
5. Attention: with sample packing upstream's argument check switches the models to ``flash_attention_2`` (a CUDA
   kernel) -> :func:`patch_actor_attention` loads them with the run's CPU kernel (``sdpa``/``eager``), which packs
   too: transformers builds a block-diagonal causal mask from the restarting position ids. The packing itself
   (``flash_attn.bert_padding``'s index helpers) is upstream's, with torch versions of the helpers (``stubs.py``).

Enabled only by the rehearsal switch (``HARNESS_OPENRLHF_REHEARSAL=1``, set by the launcher from
``openrlhf.rehearsal: true``); :func:`install` refuses to run where CUDA is available, so a GPU machine never
trains on these stand-ins. Importing this module imports neither OpenRLHF nor DeepSpeed (vLLM workers stay clean).
"""

from __future__ import annotations

import asyncio
import os
import sys
from types import SimpleNamespace

REHEARSAL_VLLM_VERSION = "0.29.0+harness.cpu.rehearsal"  # RolloutRayActor asserts vllm > 0.8.5

ENV = "HARNESS_OPENRLHF_REHEARSAL"
BATCH_WAIT_S = 0.05  # how long a first request waits for concurrent ones to join its generate batch


def enabled(env=os.environ) -> bool:
    return env.get(ENV) == "1"


class RehearsalOnGPUError(RuntimeError):
    """The rehearsal's stand-ins must never replace the real engines on a machine that has them."""


# ------------------------------------------------------------------------------------------------ install
def install() -> None:
    """In every process of a rehearsal run (the Ray hook calls it): vLLM stub with the CPU engine, CUDA shims,
    one torch thread. Idempotent. Raises RehearsalOnGPUError where CUDA is available."""
    import torch

    if torch.cuda.is_available():
        raise RehearsalOnGPUError(
            "openrlhf.rehearsal: true replaces vLLM and CUDA calls with CPU stand-ins; this machine has CUDA "
            f"({torch.cuda.device_count()} device(s)). Remove openrlhf.rehearsal to train on the GPUs"
        )
    from harness.backends.openrlhf.rehearsal import stubs as cpu_stubs

    cpu_stubs.install()
    if cpu_stubs.is_stub("vllm"):  # vLLM's engine classes become the CPU rollout engine (the only vLLM stand-in)
        sys.modules["vllm"].__dict__.update(
            __version__=REHEARSAL_VLLM_VERSION, AsyncEngineArgs=EngineArgs, AsyncLLMEngine=CpuRolloutEngine
        )
    if getattr(torch.cuda, "_harness_rehearsal", False):
        return
    torch.set_num_threads(int(os.environ.get("HARNESS_REHEARSAL_THREADS", "1")))  # contended threads crawl
    torch.cuda.current_device = lambda: "cpu"  # every `.to(torch.cuda.current_device())` lands on the CPU
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.set_device = lambda *a, **k: None
    torch.cuda.empty_cache = lambda *a, **k: None
    torch.cuda._harness_rehearsal = True


# post-import patches of OpenRLHF modules (hook.py runs them after the plug-in's own)
TARGETS = {
    "openrlhf.utils.deepspeed.deepspeed": "harness.backends.openrlhf.rehearsal.cpu:patch_strategy_module",
    "openrlhf.trainer.ray.ppo_actor": "harness.backends.openrlhf.rehearsal.cpu:patch_ppo_actor",
    "openrlhf.trainer.ppo_utils.replay_buffer": "harness.backends.openrlhf.rehearsal.cpu:patch_replay_buffer",
    "openrlhf.models.actor": "harness.backends.openrlhf.rehearsal.cpu:patch_actor_attention",
}


def patch_actor_attention(module) -> None:
    """``Actor(..., attn_implementation=flash_attention_*)`` -> the rehearsal's CPU kernel (``openrlhf.
    attn_implementation``, in the plug-in config): upstream forces flash-attention whenever samples are packed."""
    import json

    from harness.backends.openrlhf.flags import PLUGIN_ENV

    cls = module.Actor
    real_init = cls.__init__
    kernel = (json.loads(os.environ.get(PLUGIN_ENV, "{}")).get("rehearsal") or {}).get("attn_implementation", "sdpa")

    def __init__(self, pretrain_or_model, attn_implementation="flash_attention_2", *args, **kwargs):
        if "flash_attention" in str(attn_implementation):
            attn_implementation = kernel
        real_init(self, pretrain_or_model, attn_implementation, *args, **kwargs)

    cls.__init__ = __init__


def patch_strategy_module(module) -> None:
    """``DeepspeedStrategy.setup_distributed`` builds ``init_device_mesh("cuda", ...)``: build it on the CPU."""
    real = module.init_device_mesh

    def init_device_mesh(device_type, *args, **kwargs):
        return real("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    module.init_device_mesh = init_device_mesh


def patch_replay_buffer(module) -> None:
    """``NaiveReplayBuffer.__init__`` names ``cuda:<current device>`` as its target device: the CPU here."""
    import torch

    cls = module.NaiveReplayBuffer
    real_init = cls.__init__

    def __init__(self, *args, **kwargs):
        current = torch.cuda.current_device
        torch.cuda.current_device = lambda: 0  # only for the f"cuda:{...}" string upstream builds
        try:
            real_init(self, *args, **kwargs)
        finally:
            torch.cuda.current_device = current
        self.target_device = torch.device("cpu")

    cls.__init__ = __init__


def patch_ppo_actor(module) -> None:
    """The policy -> engine weight sync, replaced (its NCCL group / CUDA IPC cannot exist on a CPU)."""
    cls = module.ActorPPOTrainer
    cls.broadcast_to_vllm = sync_weights_to_engines
    cls._init_vllm_sync_group = lambda self, backend: None


# ------------------------------------------------------------------------------------------- weight sync
def sync_weights_to_engines(self) -> None:
    """``ActorPPOTrainer.broadcast_to_vllm`` on the CPU: rank 0 gathers the policy's parameters (ZeRO-3: gathered
    as upstream does) and sends them to every rollout engine through Ray; every rank then meets at a barrier."""
    import deepspeed
    import ray
    import torch
    import torch.distributed as dist

    model = self.actor.model.module
    params = list(model.named_parameters())
    stage3 = self.strategy.args.ds.zero_stage == 3
    rank0 = not dist.is_initialized() or dist.get_rank() == 0
    with deepspeed.zero.GatheredParameters([p for _, p in params], enabled=stage3):
        state = {name: p.detach().to("cpu", torch.float32).clone() for name, p in params} if rank0 else None
    if rank0 and self.vllm_engines:
        ray.get([engine.__ray_call__.remote(_load_into_engine, state) for engine in self.vllm_engines])
    if dist.is_initialized():
        dist.barrier()


def _load_into_engine(rollout_actor, state: dict) -> int:
    """Runs inside upstream's RolloutRayActor (``__ray_call__``): load the policy's weights into its engine."""
    return rollout_actor.llm.load_weights(state)


# ---------------------------------------------------------------------------------------- rollout engine
class EngineArgs:
    """``vllm.AsyncEngineArgs``: keeps what upstream's ``create_vllm_engines`` passes (model, seed, ...)."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class CpuRolloutEngine:
    """The ``vllm.AsyncLLMEngine`` surface ``RolloutRayActor`` uses, generating with Hugging Face on the CPU.

    Requests arriving together (one rollout's prompts x samples) are generated in one left-padded ``generate``
    batch per sampling setting. A response's ``token_ids`` end with EOS when the model stopped (finish_reason
    ``stop``) as vLLM's do, else ``finish_reason`` is ``length``. Sampling is seeded per batch from the engine's
    seed; which requests share a batch depends on arrival, so runs are not bit-reproducible (vLLM's are not either).
    """

    def __init__(self, engine_args: EngineArgs):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kw = engine_args.kwargs
        self.model_path = kw["model"]
        self.seed = int(kw.get("seed", 0))
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path, trust_remote_code=True)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32).eval()
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id
        self.sleeping = False
        self.batches = 0
        self.pending: list = []
        self.worker = None
        self.output_processor = SimpleNamespace(get_num_unfinished_requests=lambda: len(self.pending))

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs) -> CpuRolloutEngine:
        return cls(engine_args)

    async def is_sleeping(self) -> bool:
        return self.sleeping

    async def sleep(self, level: int = 1) -> None:
        self.sleeping = True  # nothing to free on a CPU; the state is tracked for the calls' order

    async def wake_up(self, tags=None) -> None:
        self.sleeping = False

    async def reset_prefix_cache(self) -> None:
        return None

    async def collective_rpc(self, method, *args, **kwargs):
        raise RuntimeError(
            f"CPU rehearsal engine: collective_rpc({method!r}) is a vLLM worker call (NCCL weight sync); the "
            "rehearsal syncs weights with harness.backends.openrlhf.rehearsal.cpu.sync_weights_to_engines"
        )

    def load_weights(self, state: dict) -> int:
        """The policy's parameters by name (HF names); every engine parameter must be among them."""
        import torch

        own = dict(self.model.named_parameters())
        missing = sorted(set(own) - set(state))
        if missing:
            raise RuntimeError(f"weight sync: the policy sent no {missing[:3]} (of {len(missing)} missing)")
        with torch.no_grad():
            for name, p in own.items():
                p.copy_(state[name].to(p.dtype))
        return len(own)

    async def generate(self, prompt, sampling_params, request_id=None):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pending.append((list(prompt["prompt_token_ids"]), sampling_params, future))
        if self.worker is None or self.worker.done():
            self.worker = asyncio.ensure_future(self._drain())
        yield await future

    async def _drain(self) -> None:
        while self.pending:
            await asyncio.sleep(BATCH_WAIT_S)
            batch, self.pending = self.pending, []
            groups: dict = {}
            for item in batch:
                groups.setdefault(_sampling_key(item[1]), []).append(item)
            for key, items in groups.items():
                try:
                    outputs = self._generate([ids for ids, _, _ in items], key)
                except Exception as e:  # noqa: BLE001 - hand the error to every waiting request
                    for _, _, fut in items:
                        fut.set_exception(e)
                    continue
                for (_, _, fut), out in zip(items, outputs):
                    fut.set_result(out)

    def _generate(self, prompts: list[list[int]], key: tuple) -> list:
        import torch

        temperature, top_p, top_k, max_tokens, min_tokens, skip_special, logprobs = key
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        kwargs = dict(max_new_tokens=max_tokens, min_new_tokens=min_tokens or None, pad_token_id=self.pad_id)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else 0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        self.batches += 1
        torch.manual_seed(self.seed * 1_000_003 + self.batches)
        with torch.no_grad():
            gen = self.model.generate(
                input_ids=ids, attention_mask=mask, output_scores=logprobs, return_dict_in_generate=True, **kwargs
            )
        out = gen.sequences
        eos = self.tokenizer.eos_token_id
        results = []
        for i, row in enumerate(out[:, width:].tolist()):
            stop = row.index(eos) + 1 if eos in row else None
            tokens = row[:stop] if stop else row  # HF pads only after EOS: a row without one is all generated
            text = self.tokenizer.decode(tokens, skip_special_tokens=skip_special)
            output = SimpleNamespace(
                token_ids=tokens,
                text=text,
                finish_reason="stop" if stop else "length",
                logprobs=_sampled_logprobs(gen.scores, i, tokens) if logprobs else None,
            )
            results.append(SimpleNamespace(outputs=[output], finished=True))
        return results


def _sampled_logprobs(scores, row: int, tokens: list[int]) -> list[dict]:
    """vLLM's ``logprobs=1`` output with ``logprobs_mode="processed_logprobs"`` (what OpenRLHF asks for with its
    rollout correction on): per generated token ``{token_id: Logprob}``, the log-softmax of the scores after the
    temperature / top-p / top-k processing (HF's ``output_scores``) at the sampled token. The engine's float32
    forward against the policy's bf16 one is the rehearsal's rollout-vs-trainer mismatch."""
    import torch

    out = []
    for step, token in enumerate(tokens):
        lp = torch.log_softmax(scores[step][row].float(), dim=-1)[token]
        out.append({token: SimpleNamespace(logprob=float(lp), rank=1, decoded_token=None)})
    return out


def _sampling_key(params) -> tuple:
    """The sampling settings a batch must share (upstream builds SamplingParams with these keywords)."""
    get = lambda k, d: getattr(params, k, d)  # noqa: E731
    max_tokens = get("max_tokens", None)
    if max_tokens is None:
        raise RuntimeError("CPU rehearsal engine: SamplingParams.max_tokens is None (set --rollout.max_new_tokens)")
    return (
        float(get("temperature", 1.0)),
        float(get("top_p", 1.0)),
        int(get("top_k", -1)),
        int(max_tokens),
        int(get("min_tokens", 0) or 0),
        bool(get("skip_special_tokens", True)),
        get("logprobs", None) is not None,  # OpenRLHF asks for the sampled token's log-prob (logprobs=1)
    )


# --------------------------------------------------------------------------------------------- launcher
def ray_init_kwargs(gpus: int) -> dict:
    """``ray.init`` arguments of a rehearsal: ``gpus`` logical GPUs (upstream's placement groups ask for
    ``{"GPU": 1, "CPU": 1}`` bundles), logical CPUs to match, a small object store, no dashboard."""
    return {
        "num_gpus": int(gpus),
        "num_cpus": int(gpus) + 4,
        "object_store_memory": 256 * 1024 * 1024,
        "include_dashboard": False,
    }
