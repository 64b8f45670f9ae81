"""Upstream's ``--algo.advantage.is_correction_*`` in ``openrlhf.extra_flags`` are rewritten into the method's
``rollout_correction`` before the run id is taken: the two spellings are one config, one run id, one launch."""

import copy

import pytest

from harness.backends.openrlhf.flags import build_plan
from harness.backends.openrlhf.options import OpenRLHFConfigError
from harness.run.config import load_config
from tests.helpers.openrlhf_config import config

P = "--algo.advantage.is_correction_"


def flagged(flags, method=None):
    return config(method or {"name": "grpo"}, openrlhf={"extra_flags": flags})


def correction_argv(argv):
    return [(a, argv[i + 1]) for i, a in enumerate(argv) if a.startswith(P)]


# upstream's flags -> the harness spelling they mean (upstream's defaults: mode mask, gating ratio, [0.5, 5.0])
SAME = [
    ({P + "level": "token", P + "mode": "clip"}, "tis"),
    ({P + "level": "token"}, "icepop"),
    ({P + "level": ["seq"]}, "seq_mask"),
    (
        {P + "level": "token", P + "mode": "clip", P + "threshold": [0.8, 1.25]},
        {"scheme": "tis", "low": 0.8, "high": 1.25},
    ),
    (
        {P + "level": "seq", P + "gating": "binary_kl", P + "threshold": 0.01},
        {"level": "seq", "gating": "binary_kl", "high": 0.01},
    ),
    ({P + "level": "token", P + "gating": "tv", P + "threshold": [0.02]}, {"gating": "tv", "high": 0.02}),
]


@pytest.mark.parametrize("flags,harness", SAME)
def test_upstream_flags_are_the_method_correction(flags, harness, tmp_path):
    by_flags = load_config(flagged(flags))
    by_method = load_config(config({"name": "grpo", "rollout_correction": harness}))
    assert by_flags.run_id() == by_method.run_id()
    assert by_flags.to_dict() == by_method.to_dict()
    assert not [k for k in by_flags.openrlhf.extra_flags if k.startswith(P)]  # recorded once, in the method
    launched = correction_argv(build_plan(by_flags, tmp_path).argv)
    assert launched == correction_argv(build_plan(by_method, tmp_path).argv)
    assert [a for a, _ in launched] == [P + k for k in ("level", "mode", "gating", "threshold")]


def test_worked_values_of_a_rewrite(tmp_path):
    """By hand: a single threshold is [0, HIGH] (upstream's reading); the launch prints both bounds."""
    cfg = load_config(flagged({P + "level": "seq", P + "gating": "binary_kl", P + "threshold": 0.01}))
    assert cfg.method["rollout_correction"] == {
        "level": "seq",
        "mode": "mask",
        "gating": "binary_kl",
        "low": 0.0,
        "high": 0.01,
        "rejected": "keep",
    }
    argv = build_plan(cfg, tmp_path).argv
    i = argv.index(P + "threshold")
    assert argv[i + 1 : i + 3] == ["0.0", "0.01"]


def test_level_off_is_no_correction_and_the_same_run():
    plain = load_config(config())
    assert load_config(flagged({P + "level": "off"})).run_id() == plain.run_id()
    assert load_config(flagged({P + "level": "off"}, {"name": "grpo", "rollout_correction": "off"})).run_id() == (
        plain.run_id()
    )


def test_agreeing_spellings_are_accepted_and_the_caller_mapping_is_untouched():
    raw = flagged(
        {P + "level": "token", P + "mode": "clip", "--vllm.enforce_eager": True},
        {"name": "grpo", "rollout_correction": "tis"},
    )
    before = copy.deepcopy(raw)
    cfg = load_config(raw)
    assert raw == before
    assert cfg.method["rollout_correction"] == "tis"
    assert cfg.openrlhf.extra_flags == {"--vllm.enforce_eager": True}  # other flags pass through


def test_a_stored_config_reloads_to_the_same_run(tmp_path):
    """config.yaml holds the harness spelling; reading it back is the same run (the resume path)."""
    import yaml

    cfg = load_config(flagged({P + "level": "token", P + "mode": "clip"}))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    assert load_config(path).run_id() == cfg.run_id()


@pytest.mark.parametrize(
    "flags,method,match",
    [
        (
            {P + "threshold": [0.5, 2.0]},
            None,
            r"is_correction_threshold without --algo\.advantage\.is_correction_level",
        ),
        ({P + "mode": "clip"}, {"name": "grpo", "rollout_correction": "tis"}, "does nothing upstream"),
        (
            {P + "level": "token"},
            {"name": "grpo", "rollout_correction": "tis"},
            r'spell rollout_correction "icepop" and method\.rollout_correction is "tis"',
        ),
        ({P + "level": "off"}, {"name": "grpo", "rollout_correction": "icepop"}, r'spell rollout_correction "off"'),
        ({P + "enable": True}, None, r"is_correction_enable is not an OpenRLHF 0\.11\.2 flag"),
        ({P + "level": "tok"}, None, r"is_correction_level 'tok' is not allowed\. Did you mean 'token'\?"),
        ({P + "level": "seq", P + "mode": "clip"}, None, "mode clip needs level token"),
        ({P + "level": "token", P + "threshold": "0.5 2"}, None, r"takes HIGH or \[LOW, HIGH\]"),
        ({P + "level": "token", P + "threshold": [2.0, 0.5]}, None, "low 2.0 is above high 0.5"),
        ({P + "level": "token", P + "gating": "tv"}, None, "gating .tv. takes an upper bound only"),
    ],
)
def test_bad_upstream_flags_are_named(flags, method, match):
    with pytest.raises(OpenRLHFConfigError, match=match):
        load_config(flagged(flags, method))
