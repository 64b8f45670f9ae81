"""The disk plan and the evaluation plan of the paper sweep's cells (docs/gpu.md "Disk plans and retention",
"Evaluation plan"), with every number computed by hand below from the Qwen2.5 shapes, and the refusals: a cell
over its resources.disk_gb or a sweep over the free space (before anything is written), an engine that cannot
run (at load)."""

import copy
from pathlib import Path

import pytest
import yaml

from harness.backends import get_backend
from harness.run.after_training import EngineSettings, engine_settings
from harness.run.config import ConfigError, load_config
from harness.sweeps.expand import expand
from harness.sweeps.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "sweeps" / "paper_qwen25.yaml"
P7, P32 = 7_615_616_512, 32_763_876_352  # metadata.total_size / 2 of the published safetensors indexes
GiB = 2**30
# the after-training work at the suites' own protocols: AIME24/25 30 x 32, AMC23 40 x 32, then greedy
GENERATIONS = 30 * 32 + 30 * 32 + 40 * 32 + 500 + 272 + 674 + 4428  # OlympiadBench: 674 at the pinned commit
LOG_PER_STEP = 64 * 1024


@pytest.fixture(scope="module")
def cells():
    by_alias = {c.alias: c for c in expand(load_spec(SPEC))}
    return by_alias["qwen2.5-7b__grpo__s0"], by_alias["qwen2.5-32b__grpo__s0"]


def plan_of(cell_or_config):
    cfg = load_config(getattr(cell_or_config, "config", cell_or_config))
    return get_backend(cfg.backend).disk_plan(cfg)


def test_the_seven_suites_are_9074_generations_of_8192_tokens():
    assert GENERATIONS == 9074


def test_disk_plan_of_a_7b_cell(cells):
    plan = plan_of(cells[0])
    terms = {t.name: (t.copies, t.each) for t in plan.terms}
    assert terms == {
        "DeepSpeed checkpoints": (2, 14 * P7),  # ZeRO-2: fp32 master + Adam m, v (12 B) + the bf16 module (2 B)
        "HF copies": (2, 2 * P7 + 16_000_000),  # bf16 weights + tokenizer/config allowance
        "final model": (1, 2 * P7 + 16_000_000),
        "eval generations": (1, GENERATIONS * (8192 * 8 + 1000)),
        "logs": (1, 2600 * LOG_PER_STEP),
    }
    assert (
        plan.total == 259_753_102_672
    )  # = 213,237,262,336 + 30,494,466,048 + 15,247,233,024 + 603,747,664 + 170,393,600
    assert plan.total < 300e9 == cells[0].resources["disk_gb"] * 1e9  # the stated 7B budget, with the defaults
    assert "260 saves" in plan.retention and "2 DeepSpeed checkpoints" in plan.retention
    assert plan.lines()[0].endswith(": 259.8 GB")


def test_disk_plan_of_a_32b_cell(cells):
    plan = plan_of(cells[1])
    terms = {t.name: (t.copies, t.each) for t in plan.terms}
    assert terms == {
        "DeepSpeed checkpoints": (2, 12 * P32),  # ZeRO-3: every rank writes only a placeholder of the module
        "HF copies": (2, 2 * P32 + 16_000_000),
        "final model": (1, 2 * P32 + 16_000_000),
        "eval generations": (1, 603_747_664),
        "logs": (1, 1100 * LOG_PER_STEP),
    }
    assert (
        plan.total == 983_640_127_824
    )  # = 786,333,032,448 + 131,087,505,408 + 65,543,752,704 + 603,747,664 + 72,089,600
    assert plan.total < cells[1].resources["disk_gb"] * 1e9 == 1100e9
    assert "110 saves" in plan.retention


def test_without_retention_a_7b_cell_would_keep_every_hf_copy(cells):
    """The issue's 4 TB: 260 HF copies of 15.2 GB when no copy is ever deleted."""
    cfg = copy.deepcopy(cells[0].config)
    cfg["openrlhf"].update(keep_hf_checkpoints=10**6)
    terms = {t.name: t for t in plan_of(cfg).terms}
    assert terms["HF copies"].copies == 260 and terms["HF copies"].total == 260 * (2 * P7 + 16_000_000)


def test_eval_plan_of_a_7b_cell(cells):
    cfg = load_config(cells[0].config)
    s = engine_settings(cfg, get_backend(cfg.backend))
    # budget 0.85 x 80 GiB = 68 GiB; TP 1: weights 2 P7 = 15,231,233,024 B <= half of it (the memory plan's rule)
    # KV = 68 GiB - 15,231,233,024 - 2 GiB = 55,635,727,360 B at 2 x 28 layers x 4 heads x 128 x 2 B = 57,344 B/token
    assert (s.tensor_parallel_size, s.data_parallel_size, s.max_model_len) == (1, 8, 2048 + 8192)
    assert s.gpu_memory_utilization == 0.85
    assert (68 * GiB - 2 * P7 - 2 * GiB) // 57_344 == 970_210
    assert "970210 tokens = 94 sequences of 10240 per engine, 752 in all" in s.lines[1]
    assert "9074 generations" in s.lines[2] and "74.3M new tokens" in s.lines[2]  # 9074 x 8192


def test_eval_plan_of_a_32b_cell_splits_the_weights(cells):
    cfg = load_config(cells[1].config)
    s = engine_settings(cfg, get_backend(cfg.backend))
    # TP 1: weights 65,527,752,704 B > 34 GiB (half the budget); TP 2: 32,763,876,352 B per GPU <= 34 GiB
    # KV = 68 GiB - 32,763,876,352 - 2 GiB = 38,103,084,032 B at 2 x 64 x ceil(8 / 2) x 128 x 2 B = 131,072 B/token
    assert (s.tensor_parallel_size, s.data_parallel_size, s.max_model_len) == (2, 4, 10240)
    assert (68 * GiB - P32 - 2 * GiB) // 131_072 == 290_703
    assert "290703 tokens = 28 sequences of 10240 per engine, 112 in all" in s.lines[1]
    assert "TP 2: weights 30.5 + other 2.0 + KV 35.5 = budget 68.0 GiB per GPU (0.85 x 80)" in s.lines[1]


def paper_32b(cells, **eval_section):
    cfg = copy.deepcopy(cells[1].config)
    cfg["eval"].update(eval_section)
    return cfg


def test_a_32b_engine_that_cannot_hold_a_sequence_is_refused_at_load(cells):
    # TP 1 at 0.8 x 80 GiB: 64 GiB - 65,527,752,704 - 2 GiB = 1,044,240,384 B = 3983 tokens < 10240
    assert (64 * GiB - 2 * P32 - 2 * GiB) // 262_144 == 3983
    with pytest.raises(
        ConfigError, match=r"^eval.tensor_parallel_size: 1 does not fit 80 GiB per GPU .*3983 tokens = 0 "
    ):
        load_config(paper_32b(cells, tensor_parallel_size=1, gpu_memory_utilization=0.8))
    s = engine_settings(load_config(paper_32b(cells, gpu_memory_utilization=0.8)), get_backend("openrlhf"))
    assert s.tensor_parallel_size == 2  # auto takes the rule's TP, which fits


@pytest.mark.parametrize(
    "section, message",
    [
        (
            {"tensor_parallel_size": 3},
            r"^eval.tensor_parallel_size: 3 does not split .* 40 attention heads .*allowed: 1, 2, 4, 8",
        ),
        (
            {"data_parallel_size": 8},
            r"^eval.data_parallel_size: 8 engines x tensor_parallel_size 2 need 16 GPUs.*at most 4",
        ),
        ({"max_model_len": 8192}, r"^eval.max_model_len: 8192 leaves no room for a prompt before the stage's 8192"),
    ],
)
def test_engine_settings_that_cannot_run_are_refused_at_load(cells, section, message):
    with pytest.raises(ConfigError, match=message):
        load_config(paper_32b(cells, **section))


def test_a_plan_is_made_only_where_the_stage_uses_vllm(cells):
    cfg = copy.deepcopy(cells[1].config)
    cfg["eval"]["engine"] = "hf"
    assert get_backend("openrlhf").eval_plan(load_config(cfg)) is None
    cfg["eval"].update(engine="auto")
    cfg["train"]["device"] = "cpu"
    assert get_backend("openrlhf").eval_plan(load_config(cfg)) is None


def test_a_backend_without_a_plan_gets_the_eval_section(tiny):
    cfg = load_config({**tiny, "eval": {"tensor_parallel_size": 2, "max_model_len": 64, "gpu_memory_utilization": 0.5}})
    assert engine_settings(cfg, get_backend(cfg.backend)) == EngineSettings(2, 1, 64, 0.5)
    assert engine_settings(load_config(tiny), get_backend("pocket")) == EngineSettings(1, 1, None, 0.85)


def spec_with(tmp_path, resources=None, **openrlhf):
    data = yaml.safe_load(SPEC.read_text())
    data["zip"][0] = {k: v[:1] for k, v in data["zip"][0].items()}  # 7B only
    data["grid"] = {"method": [{"name": "grpo"}]}
    data["seeds"] = [0]
    data.pop("exclude")
    data["base"]["openrlhf"].update(openrlhf)
    data["resources"]["default"].update(resources or {})
    data["resources"].pop("groups")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_cell_over_its_disk_budget_is_refused_in_the_dry_run(tmp_path, capsys):
    from harness.cli import main

    spec = spec_with(tmp_path, {"disk_gb": 250})
    assert main(["sweep", str(spec), "--dry-run", "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "error: cell s0: its disk plan needs 259.8 GB at its peak, over its resources.disk_gb 250 "
        "(DeepSpeed checkpoints 2 x 106.62, HF copies 2 x 15.25, final model 1 x 15.25"
    )
    assert "keep the newest 2 DeepSpeed checkpoints (openrlhf.keep_checkpoints)" in err[0]
    assert main(["sweep", str(spec_with(tmp_path, {"disk_gb": 260})), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# disk plan (estimate at the run's peak; docs/gpu.md 'Disk plans and retention'): 259.8 GB" in out
    assert "disk_gb: 260 (each cell's disk plan must fit it" in out
    assert "\ndisk: 1 cells plan 259.8 GB in all (1 x 259.8 GB)" in out
    assert "# eval plan (after training, estimate per GPU; docs/gpu.md 'Evaluation plan'): vLLM TP 1 x DP 8" in out


def test_a_sweep_over_the_free_space_is_refused_before_anything_is_written(tmp_path, capsys):
    """A plan no file system holds (a million HF copies of 15 GB): refused at submit, nothing written or queued."""
    from harness.cli import main

    spec = spec_with(tmp_path, nodes=1, keep_hf_checkpoints=10**6)
    runs = tmp_path / "runs"
    data = yaml.safe_load(spec.read_text())
    data["base"]["train"]["checkpoint_every"] = 1
    data["zip"][0]["train.steps"] = [10**6]  # 10^6 HF copies of 15.2 GB: 15 PB
    data["resources"]["default"].update(nodes=1)
    data["resources"]["default"].pop("disk_gb")
    data.pop("stage_dir", None)  # the free-space check, not the stage's (tests/sweeps/test_staging.py)
    spec.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(spec), "--executor", "local", "--runs-dir", str(runs), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"error: {runs}: the disk plans of the 1 cells to submit need " in err and "GB free" in err
    assert not runs.exists() or sorted(p.name for p in runs.iterdir()) == [".submit.lock"]


def test_the_section_protocol_plans_its_own_samples_and_tokens(cells):
    """eval.protocol: section scores every suite with the eval section's n and max tokens (the CPU rehearsal's)."""
    cfg = copy.deepcopy(cells[0].config)
    cfg["eval"].update(protocol="section", n_samples=4, max_new_tokens=8192)
    terms = {t.name: t for t in plan_of(cfg).terms}
    assert terms["eval generations"].total == (30 + 30 + 40 + 500 + 272 + 674 + 4428) * 4 * (8192 * 8 + 1000)
    assert terms["eval generations"].how.startswith("23896 generations of at most 8192 tokens")


def test_the_paper_sweeps_dry_run_prints_both_plans_for_every_cell(tmp_path, capsys):
    from harness.cli import main

    assert main(["sweep", str(SPEC), "--dry-run", "--runs-dir", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert out.count("# disk plan (estimate at the run's peak; docs/gpu.md 'Disk plans and retention'): 259.8 GB") == 12
    assert out.count("# disk plan (estimate at the run's peak; docs/gpu.md 'Disk plans and retention'): 983.6 GB") == 12
    assert out.count("#   retention: 260 saves") == 12 and out.count("#   retention: 110 saves") == 12
    assert out.count("vLLM TP 1 x DP 8 on the head node's 8 GPUs (of 4 x 8), max_model_len 10240") == 12
    assert out.count("vLLM TP 2 x DP 4 on the head node's 8 GPUs (of 4 x 8), max_model_len 10240") == 12  # 32B
    assert "\ndisk: 24 cells plan 14920.7 GB in all (12 x 259.8 + 12 x 983.6 GB)" in out
