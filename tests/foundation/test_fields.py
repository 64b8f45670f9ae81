"""One field language (issue 36 item 2): core sections, backend sections, method hyperparameters and estimator
options are declared with one ``opt`` and checked by one ``check_value``, so a value is read, refused and reported
the same way wherever it is written, whether it comes from a YAML file, a ``key=value`` override or a Python dict."""

import dataclasses

import pytest

import harness
from harness.io import load_yaml
from harness.kernel.fields import check_value, opt, spec
from harness.run.config import ConfigError, load_config

PRIME = {"name": "prime", "samples_per_prompt": 2}


def test_hparam_and_option_are_the_one_declaration():
    assert harness.hparam is opt and harness.option is opt
    f = opt(0.5, "a weight", low=0.0, low_open=True)
    assert f.default == 0.5 and spec(f)["kind"] is float and spec(f)["help"] == "a weight"


@pytest.mark.parametrize(
    "value, kind, typed",
    [
        ("2e-3", float, 0.002),
        ("1e9", int, 1_000_000_000),
        ("1.0e9", int, 1_000_000_000),
        (1e9, int, 1_000_000_000),
        ("-1.5E-2", float, -0.015),
        (3, float, 3.0),
        ("7", int, 7),
    ],
)
def test_numbers_written_as_strings_are_read_as_numbers(value, kind, typed):
    got = check_value(value, {"kind": kind}, "x")
    assert got == typed and type(got) is kind


@pytest.mark.parametrize(
    "value, kind, message",
    [
        (2.5, int, "x: expected an integer, got 2.5"),
        ("2.5e0", int, "x: expected an integer, got 2.5"),
        ("fast", float, "x: expected a number, got 'fast'"),
        (True, float, "x: expected a number, got True"),
        ("nan", float, "x: expected a number, got 'nan'"),
        (float("inf"), float, "x: expected a finite number, got inf"),
        ("1e400", float, "x: expected a finite number, got inf"),
    ],
)
def test_other_values_are_refused_naming_what_is_allowed(value, kind, message):
    with pytest.raises(ConfigError) as e:
        check_value(value, {"kind": kind}, "x")
    assert str(e.value) == message


@pytest.mark.parametrize(
    "text, value",
    [
        ("2e-3", 0.002),
        ("1e9", 1e9),
        ("1.0e9", 1e9),
        ("-1E-3", -0.001),
        ("+5e2", 500.0),
        (".5e1", 5.0),
        ("1.0e-6", 1e-6),  # YAML 1.1 already: unchanged
        ("5", 5),
        ("0.5", 0.5),
        ("e5", "e5"),
        ("1.2.3", "1.2.3"),
        ("2e", "2e"),
    ],
)
def test_the_yaml_loader_reads_scientific_notation_as_yaml_1_2(text, value):
    got = load_yaml(f"x: {text}")["x"]
    assert got == value and type(got) is type(value)


def test_a_yaml_file_an_override_and_a_python_dict_give_one_config():
    section = {"name": "kl_cov", "k_ratio": 0.002}
    want = load_config({"method": section}).run_id()
    assert load_config({"method": {**section, "k_ratio": "2e-3"}}).run_id() == want  # a Python dict
    assert load_config({}, ["method={name: kl_cov, k_ratio: 2e-3}"]).run_id() == want  # an override
    assert load_config(load_yaml("method: {name: kl_cov, k_ratio: 2e-3}")).run_id() == want  # a YAML file's text
    assert load_config({}, ["train.steps=1e2"]).train.steps == load_config({"train": {"steps": "1e2"}}).train.steps


@pytest.mark.parametrize(
    "where, overrides, message",
    [
        ("core", ["train.lr=big"], "train.lr: expected a number, got 'big'"),
        ("backend", ["model.warm_start.lr=big"], "model.warm_start.lr: expected a number, got 'big'"),
        ("method", ["method={name: kl_cov, beta: big}"], "method: kl_cov.beta: expected a number, got 'big'"),
        (
            "estimator",
            ["method={name: prime, advantage_options: {beta: big}}", "train.samples_per_prompt=2"],
            "method: prime.advantage_options.beta: expected a number, got 'big'",
        ),
        ("task", ["task.options={digits: big}"], "task.options.digits: expected an integer, got 'big'"),
    ],
)
def test_one_bad_value_gets_one_message_wherever_it_is_written(where, overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config({}, overrides)
    assert str(e.value) == message


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["train.lr=0"], "train.lr: 0 must be > 0.0"),
        (["method={name: kl_cov, k_ratio: 0}"], "method: kl_cov.k_ratio: 0 must be > 0.0"),
        (
            ["method={name: prime, advantage_options: {beta: 0}}", "train.samples_per_prompt=2"],
            "method: prime.advantage_options.beta: 0 must be > 0.0",
        ),
        (
            ["backend=openrlhf", "model.name=Qwen/Qwen2.5-7B", "model.warm_start={}", "openrlhf.gpu_memory_gb=0"],
            "openrlhf.gpu_memory_gb: 0 must be > 0.0",
        ),
    ],
)
def test_an_exclusive_lower_bound_is_the_same_everywhere(overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config({"eval": {"every": 0}, "train": {"micro_batch_size": 1}}, overrides)
    assert str(e.value).startswith(message)


def test_a_method_hyperparameter_outside_the_run_id_is_refused_at_registration():
    """A method's section is its identity as a whole: ``measures=False`` has no meaning there and is refused."""

    class Logged(harness.MethodBase):
        log_every: int = opt(10, "log interval", measures=False)

    with pytest.raises(TypeError, match="'logged_method': log_every declared measures=False"):
        harness.register_method("logged_method")(Logged)
    assert "logged_method" not in harness.list_methods()


def test_every_backend_section_is_declared_with_the_one_language():
    from harness.backends import owned_sections

    for path, cls in owned_sections().items():
        for f in dataclasses.fields(cls):
            assert {"kind", "help", "measures", "late"} <= set(f.metadata), f"{path}.{f.name}"


def test_task_options_read_numbers_and_are_recorded_typed():
    cfg = load_config({}, ["task.name=gsm_arith", "task.options={pool: 1e3, shots: 2, levels: 12}"])
    assert cfg.task.options == {"pool": 1000, "shots": 2, "levels": 12} and type(cfg.task.options["pool"]) is int
    assert (
        cfg.run_id()
        == load_config({}, ["task.name=gsm_arith", "task.options={pool: 1000, shots: 2, levels: 12}"]).run_id()
    )


def test_a_plugin_tasks_option_pairs_still_work():
    """Tasks registered by other packages may declare ``options_schema = {name: (default, check)}`` (before opt)."""
    from harness.backends.pocket.tasks import _check_options

    schema = {"size": (3, lambda v: None if v in (3, 5) else "expected 3 or 5"), "mode": opt("a", choices=("a", "b"))}
    assert _check_options("t", {"size": 5}, schema) == ({"size": 5, "mode": "a"}, {"size": 5})
    with pytest.raises(ConfigError, match=r"^task.options.size: 4 is not allowed; expected 3 or 5$"):
        _check_options("t", {"size": 4}, schema)


@pytest.mark.parametrize(
    "resources, result",
    [
        ({"timeout_min": "1e2", "mem_gb": 64, "setup": ["module load x, y"]}, None),
        ({"nodes": 1.5}, "resources.default.nodes: expected an integer, got 1.5"),
        ({"nodes": 0}, "resources.default.nodes: 0 must be >= 1"),
        ({"setup": "module load x"}, "resources.default.setup: 'module load x' is not allowed; expected a list of"),
    ],
)
def test_resource_options_are_checked_by_the_same_rules(resources, result):
    from harness.sweeps.resources import check_resources

    if result is None:
        assert check_resources(resources, "resources.default") == {**resources, "timeout_min": 100}
    else:
        with pytest.raises(ValueError) as e:
            check_resources(resources, "resources.default")
        assert str(e.value).startswith(result)
