"""A plain OpenRLHF run config (7B, one 8-GPU node) for the launcher's pure-Python tests."""


def config(method=None, openrlhf=None, **train) -> dict:
    """``method`` (default GRPO), ``openrlhf:`` keys and ``train:`` keys over the plain config."""
    return {
        "backend": "openrlhf",
        "seed": 1,
        "method": method or {"name": "grpo"},
        "model": {"name": "Qwen/Qwen2.5-7B"},
        "task": {"name": "/data/dapo.jsonl"},
        "train": {
            "steps": 10,
            "prompts_per_step": 16,
            "samples_per_prompt": 8,
            "updates_per_rollout": 4,
            "micro_batch_size": 4,
            "lr": 5e-7,
            "max_new_tokens": 1024,
            "grad_clip": 1.0,
            "temperature": 1.0,
            "checkpoint_every": 5,
            **train,
        },
        "openrlhf": {"nodes": 1, "gpus_per_node": 8, **(openrlhf or {})},
    }
