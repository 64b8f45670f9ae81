"""DAPO's cap on generation batches (``train.max_gen_batches``, the official ``max_num_gen_batches``) in upstream's own
dynamic-filtering loop: OpenRLHF 0.11.2's ``SamplesGenerator.generate_samples`` / ``_generate_vllm`` with a real
local Ray engine actor in place of vLLM (which cannot run here), answering upstream's ``generate_responses`` calls
with responses scored by their prompt's label. Upstream refills every filtered group with a new prompt and has no
cap; with the plug-in it stops drawing at ``max_gen_batches x rollout.batch_size`` prompts for one step."""

from types import SimpleNamespace

import pytest
from orl_testlib import plugin_config

pytestmark = pytest.mark.openrlhf

SCORES = {"1": (1.0, 1.0), "0": (0.0, 0.0), "h": (1.0, 0.0)}  # a prompt's 2 responses: all right / wrong / one each


@pytest.fixture(scope="module")
def ray_local():  # one local Ray for the module: a second init/shutdown in one process can abort in ray.shutdown
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _generator(ray, labels):
    from harness.backends.openrlhf import hook

    hook.install()
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator

    @ray.remote(num_cpus=0)
    class ScoredEngine:  # the RolloutRayActor surface SamplesGenerator calls
        def get_num_unfinished_requests(self):
            return 0

        def generate_responses(self, prompt, label, sampling_params, max_length, hf_tokenizer, num_samples, images):
            return [
                {
                    "observation_tokens": [5, 6, 7, 8],
                    "action_ranges": [(2, 4)],
                    "reward": SCORES[label][i],
                    "scores": SCORES[label][i],
                    "rollout_log_probs": None,
                    "prompt": prompt,
                    "label": label,
                    "truncated": False,
                }
                for i in range(num_samples)
            ]

    ns = SimpleNamespace
    args = ns(
        rollout=ns(batch_size=2, n_samples_per_prompt=2, vllm_generate_batch_size=None),
        vllm=ns(enable_sleep=False),
        algo=ns(
            dynamic_filtering_enable=True, dynamic_filtering_range=[0.0, 1.0], advantage=ns(is_correction_level="off")
        ),
    )
    loader = [(i, [f"p{i}"], [label], [None]) for i, label in enumerate(labels)]  # upstream's loader: batches of 1
    return SamplesGenerator(ns(args=args), loader, None, None, [ScoredEngine.remote()])


def _prompts(samples) -> list[str]:
    return sorted({e.prompts[0] for e in samples})


def test_dynamic_filtering_stops_at_max_gen_batches(ray_local, configure, capsys):
    """max_gen_batches 2 x 2 prompts: p1, p2, p3 are all-wrong groups, so the refills stop after 4 prompts with one
    group kept (upstream alone would draw p4 and fill the batch); the cap is logged and warned about, the next step
    continues with p4, and the loader's real end is still reported as exhausted."""
    from harness.backends.openrlhf import plugin

    plugin.configure({**plugin_config({"name": "grpo"}), "max_gen_batches": 2})
    gen = _generator(ray_local, ["h", "0", "0", "0", "h", "h", "1", "h"])
    kwargs = {"max_new_tokens": 4, "max_len": 16}

    samples, _, drawn, exhausted = gen.generate_samples(**kwargs)
    assert (_prompts(samples), drawn, exhausted) == (["p0"], 4, False)
    assert plugin.generation_stats() == {
        "rollout/batches": 2.0,
        "rollout/kept_groups": 1.0,
        "filter/kept_frac": 0.25,
        "filter/gen_cap_hit": 1.0,
    }
    assert "harness: WARNING dynamic filtering reached train.max_gen_batches = 2: 4 prompts drawn, 1 of 2" in (
        capsys.readouterr().out
    )

    samples, _, drawn, exhausted = gen.generate_samples(**kwargs)  # the next step: the loader was not ended
    assert (_prompts(samples), drawn, exhausted) == (["p4", "p5"], 2, False)
    assert plugin.generation_stats() == {
        "rollout/batches": 1.0,
        "rollout/kept_groups": 2.0,
        "filter/kept_frac": 1.0,
        "filter/gen_cap_hit": 0.0,
    }

    samples, _, drawn, exhausted = gen.generate_samples(**kwargs)  # p6 filtered, no prompt left to refill it
    assert (_prompts(samples), drawn, exhausted) == (["p7"], 2, True)
    assert plugin.generation_stats()["filter/gen_cap_hit"] == 0.0
    assert plugin.generation_stats() == {}  # taken once per logged step


def test_without_dynamic_filtering_nothing_is_capped(ray_local, configure):
    """The eval's generation (dynamic_filtering=False) and runs without dynamic filtering (no cap in the plug-in
    config) go through upstream's loop unchanged."""
    from harness.backends.openrlhf import plugin

    plugin.configure({**plugin_config({"name": "grpo"}), "max_gen_batches": None})
    gen = _generator(ray_local, ["h", "0", "0", "0", "h"])
    samples, _, drawn, exhausted = gen.generate_samples(max_new_tokens=4, max_len=16)
    assert (_prompts(samples), drawn, exhausted) == (["p0", "p4"], 5, False)  # upstream refills until full
    assert plugin.generation_stats() == {}


def test_two_refill_loops_of_one_step_add_their_wanted_prompts_too():
    """A step that runs the refill loop twice (each within its own cap of 4 x 8 prompts) logs the step's ratio,
    never above the cap: the rehearsal once logged rollout/batches 4.5 with max_gen_batches 4 (wanted not summed)."""
    from harness.backends.openrlhf import plugin

    plugin.generation_stats()  # start from an empty step
    plugin.record_generation(drawn=32, kept=3, wanted=8, cap=4, capped=True)
    plugin.record_generation(drawn=20, kept=8, wanted=8, cap=4, capped=False)
    stats = plugin.generation_stats()
    assert stats == {
        "rollout/batches": 52 / 16,
        "rollout/kept_groups": 11.0,
        "filter/kept_frac": 11 / 52,
        "filter/gen_cap_hit": 1.0,
    }
