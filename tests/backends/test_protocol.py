"""The Backend protocol's declared facts agree with the code behind them."""


def test_pocket_population_member_keys_are_its_population_modules():
    """Sweeps group population members by the protocol's keys; pocket's population trains on its own list."""
    from harness.backends import get_backend
    from harness.backends.pocket.population_rules import MEMBER_KEYS

    assert get_backend("pocket").population_member_keys == MEMBER_KEYS
