"""The backend-parity check: one batch, one set of weights, each backend's own loss path -> (loss, gradient).

Shared by tests/backends/test_backend_parity.py (pocket vs TRL, default suite) and
tests/openrlhf/test_parity_trl.py (pocket vs OpenRLHF, the ``openrlhf`` suite: OpenRLHF lives in its own venv,
without TRL). Pocket is the common reference, so the three agree when both comparisons pass.

The batch: 8 responses to 4 prompts of different lengths (left padding), responses of 1-7 tokens (right padding),
old log-probs = the model's own + noise (ratios outside the clip range), advantages from the method's estimator on
fixed 0/1 scores, the rows in the order pocket's shuffle of RL step 3 puts them (``make_generator(seed, 3,
"shuffle")``), every backend cutting them into the same micro-batches of 2 (one optimizer step of 4 micro-batches).
The model is pocket-0.3m with its embedding (tied LM head) scaled up, so token entropies and covariances are
spread out: selections (top-k covariance, top-20% entropy) have no near-ties that float rounding could flip.

    python tests/backends/parity_lib.py      # the pocket-vs-TRL rows of the docs/backends.md table
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

SEED, STEP, MICRO = 0, 3, 2
SCORES = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
PROMPT_LENS = [3, 3, 6, 6, 4, 4, 5, 5]
RESPONSE_LENS = [5, 7, 2, 7, 1, 6, 4, 3]

# the parity cases: every registered method at its defaults, PRIME aside (its auxiliary model is refused by OpenRLHF
# and TRL); adaptive entropy also with its bonus on (its default c0 is 0); the selection methods also at global
# scope (Clip-Cov / KL-Cov with 10% of the tokens, so several are drawn / ranked); the aggregation modes OpenRLHF
# lacks (pocket vs TRL only)
CASES = {
    "adaptive_entropy": {"name": "adaptive_entropy"},
    "adaptive_entropy/c0=0.01": {"name": "adaptive_entropy", "coef_init": 0.01},
    "ce_gppo": {"name": "ce_gppo"},
    "cispo": {"name": "cispo"},
    "clip_cov": {"name": "clip_cov"},
    "clip_cov/global": {"name": "clip_cov", "scope": "global", "clip_ratio": 0.1},
    "clip_higher": {"name": "clip_higher"},
    "entropy_advantage": {"name": "entropy_advantage"},
    "entropy_bonus": {"name": "entropy_bonus", "coef": 0.01},
    "grpo": {"name": "grpo"},
    "gspo": {"name": "gspo"},
    "high_entropy_tokens": {"name": "high_entropy_tokens"},
    "high_entropy_tokens/global": {"name": "high_entropy_tokens", "scope": "global"},
    "kl_cov": {"name": "kl_cov"},
    "kl_cov/global": {"name": "kl_cov", "scope": "global", "k_ratio": 0.1},
    "rloo": {"name": "rloo"},
    "sapo": {"name": "sapo"},
    "w_reinforce": {"name": "w_reinforce"},
    "grpo/seq-mean-token-sum": {"name": "grpo", "agg": "seq-mean-token-sum"},
    "grpo/seq-mean-token-sum-norm": {"name": "grpo", "agg": "seq-mean-token-sum-norm"},
}
OPENRLHF_AGGS = ("token-mean", "seq-mean-token-mean")  # what OpenRLHF's aggregate_loss implements


@dataclass
class ParityBatch:
    prompt_ids: torch.Tensor  # (B, P) left-padded
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor  # (B, T) right-padded
    completion_mask: torch.Tensor  # (B, T) float
    old_log_probs: torch.Tensor  # (B, T), 0 on padding
    advantages: torch.Tensor  # (B, T), 0 on padding

    @property
    def input_ids(self):
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self):
        return torch.cat([self.prompt_mask, self.completion_mask.long()], dim=1)


def make_method(case: str):
    import harness

    cfg = dict(CASES[case])
    return harness.get_method(cfg.pop("name"), **cfg)


def make_model():
    """pocket-0.3m (seed 0) with the embedding x 8: peaked, varied next-token distributions (float32)."""
    from harness.backends.pocket.models import build_pocket_model
    from harness.backends.pocket.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    model = build_pocket_model("pocket-0.3m", len(tok), SEED)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(8.0)
    return model, tok


def save_model(model, tok, path) -> str:
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def pocket_batch(b: ParityBatch):
    from harness.backends.pocket.generate import Batch

    return Batch(b.input_ids, b.attention_mask, b.prompt_ids.shape[1], b.completion_ids, b.completion_mask)


def make_batch(model, method) -> ParityBatch:
    """The batch above; advantages from ``method``'s estimator (its rollout entropy extra from the model's own T=1
    entropy)."""
    from harness.backends.pocket.generate import token_logprobs

    g = torch.Generator().manual_seed(1234)
    B, P, T, V = len(SCORES), max(PROMPT_LENS), max(RESPONSE_LENS), model.config.vocab_size
    prompt_ids = torch.zeros(B, P, dtype=torch.long)
    prompt_mask = torch.zeros(B, P, dtype=torch.long)
    completion_ids = torch.zeros(B, T, dtype=torch.long)
    completion_mask = torch.zeros(B, T)
    prompts = {}
    for i, (p, r) in enumerate(zip(PROMPT_LENS, RESPONSE_LENS)):
        prompt = prompts.setdefault(i // 2, [1] + torch.randint(4, V, (p - 1,), generator=g).tolist())
        prompt_ids[i, P - p :] = torch.tensor(prompt)
        prompt_mask[i, P - p :] = 1
        completion_ids[i, :r] = torch.randint(4, V, (r,), generator=g)
        if i % 3:  # some responses end with EOS, the others were cut at their length
            completion_ids[i, r - 1] = 2
        completion_mask[i, :r] = 1
    b = ParityBatch(prompt_ids, prompt_mask, completion_ids, completion_mask, None, None)
    with torch.no_grad():
        lp, ent = token_logprobs(model.eval(), pocket_batch(b), 1.0, with_entropy=True, reference=True)
    b.old_log_probs = (lp + 0.3 * torch.randn(B, T, generator=g)) * completion_mask
    extras = {"entropy": ent} if "entropy" in method.estimator_extras() else {}
    b.advantages = method.advantages(torch.tensor(SCORES), torch.arange(B) // 2, completion_mask, **extras)
    return b


def in_pocket_order(b: ParityBatch) -> ParityBatch:
    """The rows in the order pocket's ``_update`` trains them at RL step ``STEP`` (its shuffle generator), for
    the backends that are handed their micro-batches: the same rows in the same micro-batches everywhere."""
    from harness.backends.pocket.trainer import make_generator

    perm = torch.randperm(len(SCORES), generator=make_generator(SEED, STEP, "shuffle"))
    return ParityBatch(*(getattr(b, f)[perm] for f in ParityBatch.__dataclass_fields__))


def flat_grads(model) -> torch.Tensor:
    return torch.cat([p.grad.detach().flatten() for _, p in sorted(model.named_parameters()) if p.grad is not None])


class LossSpy:
    """Wraps ``method.policy_loss`` (the real one runs) and records each call's loss and selected-token count."""

    def __init__(self, method):
        self.losses, self.selected, self.real = [], 0.0, method.policy_loss
        method.policy_loss = self

    def __call__(self, *args, **kwargs):
        out = self.real(*args, **kwargs)
        self.losses.append(out.loss.detach())
        self.selected += out.metrics.get("selected/count", 0.0)
        return out


def pocket_loss_and_grad(model, b: ParityBatch, method) -> tuple[float, torch.Tensor, float]:
    """The pocket trainer's ``_update`` on the batch as one mini-batch (its shuffle, plan, micro-batch weights,
    backward), with an optimizer that changes nothing: (sum of weighted micro-batch losses, gradient, tokens
    the method selected)."""
    from harness.backends.pocket.trainer import PocketTrainer
    from harness.kernel import ops
    from harness.run.config import load_config

    cfg = load_config(
        {
            "backend": "pocket",
            "seed": SEED,
            "method": dict(method.to_config()),
            "model": {"name": "pocket-0.3m", "warm_start": {"enabled": "false"}},
            "task": {"name": "countdown"},
            "train": {
                "prompts_per_step": 4,
                "samples_per_prompt": 2,
                "updates_per_rollout": 1,
                "micro_batch_size": MICRO,
                "grad_clip": 0.0,
            },
        }
    )
    tr = PocketTrainer(cfg, "/nonexistent-parity-run", log=lambda *a: None)
    tr.model, tr.method, tr.device = copy.deepcopy(model), method, torch.device("cpu")
    tr.opt = torch.optim.SGD(tr.model.parameters(), lr=0.0)
    spy = LossSpy(method)
    try:
        tr._update(STEP, pocket_batch(b), b.old_log_probs, b.advantages)
    finally:
        method.policy_loss = spy.real
    mask = in_pocket_order(b).completion_mask  # the micro-batches _update trained, in order
    weights = [
        ops.micro_batch_weight(method.agg, mask[s : s + MICRO], mask, method.empty_rows)
        for s in range(0, len(SCORES), MICRO)
    ]
    return float(sum(w * loss for w, loss in zip(weights, spy.losses))), flat_grads(tr.model), spy.selected


def trl_loss_and_grad(model, tok, b: ParityBatch, method) -> tuple[float, torch.Tensor]:
    """TRL's ``training_step`` (our ``_prepare_inputs`` plan/weights, ``_compute_loss``, transformers' backward)
    for each micro-batch of the batch, generation replaced by the batch and TRL's shuffle by the identity (the
    rows are already in pocket's shuffled order): (sum of the returned losses, gradient)."""
    import trl.trainer.grpo_trainer as grpo_module
    from datasets import Dataset
    from trl import GRPOConfig

    from harness.backends.pocket.tokenizer import TokenizerAdapter
    from harness.backends.trl.trainer import HarnessGRPOTrainer

    B = len(SCORES)
    args = GRPOConfig(
        output_dir="/tmp/harness-parity-trl",
        use_cpu=True,
        per_device_train_batch_size=MICRO,
        gradient_accumulation_steps=B // MICRO,
        steps_per_generation=B // MICRO,
        num_generations=2,
        max_completion_length=max(RESPONSE_LENS),
        bf16=False,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        disable_tqdm=True,
        beta=0.0,
    )
    trainer = HarnessGRPOTrainer(
        model=copy.deepcopy(model),
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": ["1 2 to 3:"] * B, "problem": list(range(B))}),
        processing_class=tok,
        method=method,
        tokenizer=TokenizerAdapter(tok),
        updates_per_rollout=1,
        seed=SEED,
        on_rl_step_end=lambda *a: None,
        on_checkpoint=lambda *a: None,
    )
    full = {
        "prompt_ids": b.prompt_ids,
        "prompt_mask": b.prompt_mask,
        "completion_ids": b.completion_ids,
        "completion_mask": b.completion_mask.long(),
        "advantages": b.advantages,
        "old_per_token_logps": b.old_log_probs,
        "num_items_in_batch": b.completion_mask.sum(),
    }

    def fixed_rollout(_inputs):
        trainer.begin_updates(STEP, {})
        return dict(full)

    trainer._generate_and_score_completions = fixed_rollout
    trainer.current_gradient_accumulation_steps = B // MICRO
    saved = grpo_module.shuffle_sequence_dict
    grpo_module.shuffle_sequence_dict = lambda batch: batch
    try:
        trainer.model.train()
        losses = [trainer.training_step(trainer.model, [], None) for _ in range(B // MICRO)]
    finally:
        grpo_module.shuffle_sequence_dict = saved
    return float(sum(losses)), flat_grads(trainer.model)


def measure(case: str, other) -> dict:
    """Max abs differences of ``other``'s (loss, gradient) from pocket's on the parity batch for ``case``."""
    model, tok = make_model()
    method = make_method(case)
    b = make_batch(model, method)
    ref_loss, ref_grad, selected = pocket_loss_and_grad(model, b, make_method(case))
    loss, grad = other(model, tok, in_pocket_order(b), make_method(case))
    return {
        "loss": ref_loss,
        "selected": selected,
        "loss_diff": abs(loss - ref_loss),
        "grad_diff": float((grad - ref_grad).abs().max()),
        "grad_max": float(ref_grad.abs().max()),
        "grad_rel": float((grad - ref_grad).abs().max() / ref_grad.abs().max()),
    }


def table_row(case: str, d: dict) -> str:
    return (
        f"| {case} | {d['loss']:.6f} | {d['selected']:.0f} | {d['loss_diff']:.1e} | {d['grad_diff']:.1e} | "
        f"{d['grad_max']:.3g} |"
    )


if __name__ == "__main__":
    for case in CASES:
        print(table_row(case, measure(case, trl_loss_and_grad)), flush=True)
