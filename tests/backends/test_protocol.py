"""The Backend protocol's declared facts agree with the code behind them."""


def test_pocket_population_member_keys_are_its_population_modules():
    """Sweeps group population members by the protocol's keys; pocket's population trains on its own list."""
    from harness.backends import get_backend
    from harness.backends.pocket.population_rules import MEMBER_KEYS

    assert get_backend("pocket").population_member_keys == MEMBER_KEYS


def test_a_new_backends_section_is_typed_on_its_runs_and_changes_no_other_run_id():
    """A backend contributes a top-level section without a core change: its runs record it typed; every other run
    neither records it nor accepts a non-empty one (issue 36 item 4a, issue 37 item 6)."""
    from dataclasses import dataclass

    import pytest

    from harness.backends import BACKENDS, Backend
    from harness.kernel.fields import opt
    from harness.run.config import ConfigError, load_config
    from tests.helpers.sweep_targets import tiny_pocket_base

    @dataclass
    class MineOptions:
        workers: int = opt(2, "worker processes", kind=int, low=1)

    class Mine(Backend):
        name = "test_mine"
        sections = {"mine": MineOptions}

    pocket = tiny_pocket_base()
    before = load_config(pocket).run_id()
    BACKENDS.register("test_mine", Mine())
    try:
        assert load_config(pocket).run_id() == before and "mine" not in load_config(pocket).to_dict()
        with pytest.raises(ConfigError, match=r"^mine.workers: mine belongs to the test_mine backend, and this run's"):
            load_config({**pocket, "mine": {"workers": 4}})
        own = {**pocket, "backend": "test_mine", "model": {"name": "pocket-0.3m"}}
        cfg = load_config(own, ["mine.workers=4e0"])
        assert cfg.mine == MineOptions(workers=4) and cfg.to_dict()["mine"] == {"workers": 4}
        assert cfg.to_dict()["openrlhf"] == {}  # a section every run records (it was core when ids were published)
        with pytest.raises(ConfigError, match=r"^mine.workers: 0 must be >= 1$"):
            load_config(own, ["mine.workers=0"])
    finally:
        BACKENDS.unregister("test_mine")
