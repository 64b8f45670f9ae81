"""A finished pocket run's policy as a sampler (``PocketBackend.policy_sampler``): the mechanism probe and other
analyses sample it through the backend protocol, with the run's own sampling path and task verifier.

    sampler = get_backend("pocket").policy_sampler(cfg, run_dir)   # the warm-started policy (the run's step 1)
    batch, scores = sampler.sample(problems, n_samples=8, temperature=1.0, generator=g)
    sampler.use("end")                                             # the last checkpoint's policy
"""

from __future__ import annotations

import tempfile
from pathlib import Path


class PocketSampler:
    """``task`` (train/test problems, verifier), ``decode``, ``use("start"|"end")`` and ``sample`` (responses, mask,
    token entropy and log-probs from the sampling pass, and the verifier's 0/1 score of each response)."""

    def __init__(self, config, run_dir: str | Path):
        import torch

        from .trainer import PocketTrainer

        run_dir = Path(run_dir)
        ckpt = run_dir / "checkpoints" / "latest.pt"
        if not ckpt.is_file() or not (run_dir / "result.json").is_file():
            raise ValueError(f"{run_dir}: needs result.json and checkpoints/latest.pt (a completed pocket run)")
        blob = torch.load(ckpt, map_location="cpu", weights_only=False)
        if blob["step"] != config.train.steps:
            raise ValueError(
                f"{run_dir}: last checkpoint is step {blob['step']}, the run has {config.train.steps} steps"
            )
        self.step = int(blob["step"])
        self._trainer = PocketTrainer(config, tempfile.mkdtemp(prefix="sampler-"), log=lambda *a, **k: None)
        self._trainer.setup()  # the warm-started model (from its cache) exactly as the run's step 1 had it
        self.task = self._trainer.task
        self.decode = self._trainer.tok.decode  # token ids -> text, as the verifier reads responses
        self._states = {
            "start": {k: v.clone() for k, v in self._trainer.model.state_dict().items()},
            "end": blob["model"],
        }

    def use(self, which: str) -> None:
        if which not in self._states:
            raise ValueError(f"policy {which!r}: allowed start, end")
        self._trainer.model.load_state_dict(self._states[which])

    def sample(self, problems: list[dict], n_samples: int, temperature: float, generator):
        """``(batch, scores)``: ``n_samples`` responses per problem (rows grouped by problem) and their scores."""
        import torch

        self._trainer.model.eval()
        with torch.no_grad():
            batch = self._trainer._generate(problems, n_samples, temperature, generator, with_logprobs=True)
        return batch, self._trainer._score(batch, problems, n_samples)
