"""The pocket backend: real RL on tiny transformers on a CPU (or GPU), no downloads. See docs/pocket.md."""

from pathlib import Path

from harness.backends import register_backend
from harness.backends.base import Backend
from harness.backends.pocket import options
from harness.backends.pocket.population_rules import MEMBER_KEYS, why_apart


@register_backend
class PocketBackend(Backend):
    """Trains one run in-process. ``train`` returns the result fields; the runner writes result.json."""

    name = "pocket"
    sections = {"model.warm_start": options.WarmStartOptions}
    default_model = "pocket-0.3m"
    default_task = "arith"
    capabilities = frozenset({"auxiliary_model", "entropy_after_update", "policy_sampler", "checkpoint_on_request"})

    def validate(self, config) -> None:
        options.validate(config)

    def train(self, config, run_dir, log=print):
        from .trainer import PocketTrainer

        return PocketTrainer(config, run_dir, log=log).run()

    def check_resume(self, config, run_dir, old_config=None) -> None:
        from .trainer import check_resume

        check_resume(config, Path(run_dir), old_config)

    def export(self, config, run_dir, out=None) -> Path:
        """The last checkpoint as a model directory: ``out``, else ``RUN/export/step_<N>`` (made once, reused)."""
        from .export import export_run
        from .trainer import CheckpointUnreadable, read_checkpoint

        run_dir = Path(run_dir)
        ckpt = run_dir / "checkpoints" / "latest.pt"
        if ckpt.exists():
            try:
                blob = read_checkpoint(ckpt, mmap=True)
            except CheckpointUnreadable as e:
                raise ValueError(f"{ckpt}: unreadable checkpoint ({e}); nothing to export") from None
        if out is None:
            if not ckpt.is_file():
                raise FileNotFoundError(f"{run_dir}: no checkpoint ({ckpt}) to export; train the run first")
            step = int(blob["step"])
            out = run_dir / "export" / f"step_{step}"
            if (out / "harness_task.json").is_file():
                return out
        return export_run(config, run_dir, Path(out))

    population_member_keys = MEMBER_KEYS

    def population_apart(self, configs):
        return why_apart(configs)

    def train_population(self, configs, run_dirs):
        from .population_runner import run_population

        return run_population(configs, run_dirs)

    def relative_cost(self, config) -> float:
        """sqrt(parameters) x responses x steps: at pocket sizes a step's CPU time grows about as the square root of
        the parameter count (0.156 s at pocket-0.3m, 0.286 s at pocket-1m, docs/pocket.md)."""
        from .models import SIZES

        s = SIZES.get(config.model.name)
        params = (s.layers * (4 * s.hidden**2 + 3 * s.hidden * s.intermediate)) if s else 1e6
        t = config.train
        return params**0.5 * t.steps * t.prompts_per_step * t.samples_per_prompt

    def policy_sampler(self, config, run_dir):
        """A finished run's policy (warm start or last checkpoint) as a sampler (``pocket/sampler.py``)."""
        from .sampler import PocketSampler

        return PocketSampler(config, run_dir)

    def register_suites(self, registry) -> None:
        from .suites import register_all

        register_all(registry)

    def register_model_suite(self, registry, model_dir):
        from .suites import register_model_suite

        return register_model_suite(registry, model_dir)

    def load_tokenizer(self, path: Path):
        from .tokenizer import exact_on_disk, load_tokenizer

        if path.is_dir() and (path / "tokenizer.json").is_file() and exact_on_disk(path):
            return load_tokenizer(str(path))
        return None
