"""A setting only pocket implements is refused at load by the other backends, naming what they allow."""

import pytest


def test_another_optimizer_is_refused_on_the_gpu_backends():
    """train.optimizer (sgd, adamw_b1_0: the mechanism lab's theorem ladder) exists on pocket only."""
    from harness.run.config import ConfigError, load_config

    base = {"method": {"name": "grpo"}, "train": {"optimizer": "sgd", "micro_batch_size": 1}}
    with pytest.raises(ConfigError, match="train.optimizer: 'sgd' is not supported on the OpenRLHF backend"):
        load_config({**base, "backend": "openrlhf", "model": {"name": "Qwen/Qwen2.5-0.5B"}, "eval": {"every": 0}})
    with pytest.raises(ConfigError, match="train.optimizer: 'sgd' is not supported on the trl backend"):
        load_config({**base, "backend": "trl"})
