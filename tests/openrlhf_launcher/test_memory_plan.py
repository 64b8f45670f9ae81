"""The OpenRLHF memory plan (harness/backends/openrlhf/memory.py): hand-computed arithmetic, the rule's choices, the
refusal at load, the architecture sources (built-in Qwen2.5 table, a real saved model) and the paper sweep's plan."""

import json
from pathlib import Path

import pytest

from harness.backends.openrlhf import memory
from harness.backends.openrlhf.flags import OpenRLHFConfigError, build_plan, launch_command, parse_options
from harness.backends.openrlhf.memory import Architecture, GiB, Layout, estimate
from harness.run.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]

# 1.0e9 parameters, 16 layers, hidden 2048, 16 heads, 4 KV heads of 128, MLP 8192, vocabulary 32000, untied
ONE_B = Architecture("one-b", "hand", 1_000_000_000, 16, 2048, 16, 4, 128, 8192, 32000, False)


def layout(**change):
    base = dict(
        nodes=1,
        gpus_per_node=8,
        gpu_gib=80,
        zero_stage=2,
        adam_offload=False,
        vllm_tp=1,
        colocate=True,
        vllm_util=0.5,
        micro=1,
        rollout_micro=1,
        seq_len=4096,
        entropy="none",
    )
    return Layout(**{**base, **change})


def gib(phase, term):
    return dict(phase.terms)[term] / GiB


def test_one_billion_params_zero2_on_8_gpus_by_hand():
    plan = estimate(ONE_B, layout())
    train = plan.phase("train")
    # weights: 2 B x 1e9 (bf16, not sharded by ZeRO-2) = 2.0e9 B = 2e9 / 2^30 GiB
    assert gib(train, "weights") == pytest.approx(1.862645, abs=1e-6)
    # gradients: 2 B x 1e9 / 8 ranks = 2.5e8 B
    assert gib(train, "grads") == pytest.approx(0.232831, abs=1e-6)
    # optimizer: 12 B x 1e9 / 8 = 1.5e9 B
    assert gib(train, "optimizer") == pytest.approx(1.396984, abs=1e-6)
    # checkpoints: 16 layers x 1 x 4096 tokens x 2048 x 2 B = 268,435,456 B = 0.25 GiB
    assert gib(train, "checkpoints") == 0.25
    # recomputed layer: 2 x (2 B x 4096 x (6 x 2048 + 2 x 4 x 128 + 4 x 8192 = 46,080)) = 754,974,720 B
    assert gib(train, "layers") == 0.703125
    # logits without entropy: 4096 x 32000 x 10 B = 1,310,720,000 B
    assert gib(train, "logits") == pytest.approx(1.220703, abs=1e-6)
    assert gib(train, "gathered") == 0 and gib(train, "reference") == 0 and gib(train, "reserve") == 4.0
    # total 10,379,097,472 B
    assert train.total / GiB == pytest.approx(9.666288, abs=1e-6) and train.fits
    generate = plan.phase("generate")  # actor bf16 weights stay on the GPU next to vLLM's 0.5 x 80 GiB
    assert generate.total / GiB == pytest.approx(1.862645 + 40 + 4, abs=1e-6)
    # vLLM: KV cache = 40 GiB - 2e9 B weights - 2 GiB = 38,802,189,312 B; per token 2 x 16 x 4 x 128 x 2 = 32,768 B
    assert plan.vllm.kv_per_token == 32768 and plan.vllm.tokens == 1_184_148 and plan.fits
    # host per node: 8 GPUs x (12 B x 1e9 / 8 optimizer states asleep + 2e9 B vLLM weights asleep) = 28e9 B
    assert plan.host_gib_per_node * GiB == pytest.approx(28e9)


def test_zero3_with_offload_by_hand():
    train = estimate(ONE_B, layout(zero_stage=3, adam_offload=True)).phase("train")
    assert dict(train.terms)["weights"] == 2e9 / 8 and dict(train.terms)["grads"] == 2e9 / 8
    assert dict(train.terms)["optimizer"] == 0  # on the host
    # one layer = (1e9 - 2 x 32000 x 2048 - 2048) / 16 = 54,307,872 params < embedding 65,536,000: 2 x 2 B x 65,536,000
    assert ONE_B.layer_params == 54_307_872 and dict(train.terms)["gathered"] == 262_144_000


def test_entropy_and_reference_terms():
    tokens_vocab = 4096 * 32000
    for mode, per_logit in (("none", 10), ("forward", 14), ("grad", 20)):
        assert dict(estimate(ONE_B, layout(entropy=mode)).phase("train").terms)["logits"] == tokens_vocab * per_logit
    assert dict(estimate(ONE_B, layout(reference="gpu")).phase("train").terms)["reference"] == 2e9
    assert dict(estimate(ONE_B, layout(reference="cpu")).phase("train").terms)["reference"] == 0
    no_ckpt = estimate(ONE_B, layout(gradient_checkpointing=False)).phase("train")
    assert dict(no_ckpt.terms)["checkpoints"] == 0 and dict(no_ckpt.terms)["layers"] == 17 * 377_487_360


# ------------------------------------------------------------------------------------------ Qwen2.5 table
@pytest.mark.parametrize(
    "size,params",
    # metadata.total_size / 2 of the published safetensors indexes (7B, 32B, 72B-Instruct)
    [("7B", 15_231_233_024 // 2), ("32B", 65_527_752_704 // 2), ("72B-Instruct", 145_412_407_296 // 2)],
)
def test_qwen25_counts_equal_the_published_checkpoints(size, params):
    assert memory.architecture(f"Qwen/Qwen2.5-{size}").params == params


@pytest.mark.parametrize("size,card", [("0.5B", 0.49), ("1.5B", 1.54), ("3B", 3.09), ("7B", 7.61)])
def test_qwen25_counts_match_the_model_cards(size, card):
    assert abs(memory.architecture(f"Qwen/Qwen2.5-{size}").params / 1e9 - card) < 0.01  # cards print 7.6156 as 7.61


def test_unknown_models_are_not_guessed():
    assert memory.architecture("Qwen/Qwen2.5-Math-7B") is None  # another checkpoint family: not in the table
    assert memory.architecture("org/never-seen-model") is None


@pytest.mark.parametrize("model_type,tied", [("qwen2", True), ("qwen2", False), ("llama", False)])
def test_a_saved_model_is_counted_from_its_files(tmp_path, model_type, tied):
    import transformers

    kw = dict(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    cls = {"qwen2": transformers.Qwen2Config, "llama": transformers.LlamaConfig}[model_type]
    model = transformers.AutoModelForCausalLM.from_config(cls(**kw))
    model.save_pretrained(tmp_path)
    arch = memory.architecture(str(tmp_path))
    assert arch.params == model.num_parameters()  # safetensors headers
    assert memory.param_count(json.loads((tmp_path / "config.json").read_text())) == model.num_parameters()
    assert (arch.layers, arch.kv_heads, arch.head_dim, arch.tied) == (2, 2, 8, tied)


# ------------------------------------------------------------------------------------------ the rule
def paper_cell(model, micro=2, **openrlhf):
    return {
        "backend": "openrlhf",
        "seed": 0,
        "method": {"name": "grpo"},
        "model": {"name": model, "dtype": "bfloat16"},
        "task": {"name": "/data/dapo.jsonl"},
        "train": {
            "steps": 10,
            "prompts_per_step": 256,
            "samples_per_prompt": 8,
            "updates_per_rollout": 8,
            "micro_batch_size": micro,
            "max_new_tokens": 8192,
        },
        "openrlhf": {"max_prompt_len": 2048, "zero_stage": "auto", "adam_offload": "auto", **openrlhf},
    }


@pytest.mark.parametrize(
    "model,nodes,micro,expected",
    [
        ("Qwen/Qwen2.5-7B", 4, 2, (2, False, 1)),  # the paper's layout (4 nodes), 2 x 10240 tokens per GPU
        ("Qwen/Qwen2.5-7B", 1, 1, (2, False, 1)),  # one node of 8
        ("Qwen/Qwen2.5-7B", 1, 2, (3, False, 1)),  # ZeRO-2 would need 82.5 GiB: 2 x 10240 tokens of logits
        ("Qwen/Qwen2.5-32B", 4, 2, (3, True, 4)),
        ("Qwen/Qwen2.5-32B", 4, 1, (3, False, 4)),
        ("Qwen/Qwen2.5-32B", 1, 1, (3, True, 4)),  # one node of 8: the optimizer states go to the host
    ],
)
def test_rule_choices_on_80gb_nodes(tmp_path, model, nodes, micro, expected):
    plan = build_plan(paper_cell(model, micro, nodes=nodes, gpus_per_node=8, vllm_tp="auto"), tmp_path)
    mem = plan.memory
    assert (mem.zero_stage, mem.adam_offload, mem.vllm_tp) == expected and mem.plan.fits
    assert all(p.total <= 80 * GiB for p in mem.plan.phases)
    argv = plan.argv
    assert argv[argv.index("--ds.zero_stage") + 1] == str(expected[0])
    assert ("--ds.adam_offload" in argv) == expected[1]
    assert argv[argv.index("--vllm.tensor_parallel_size") + 1] == str(expected[2])
    assert argv[argv.index("--vllm.num_engines") + 1] == str(nodes * 8 // expected[2])


def test_rule_for_vllm_tp():
    budget = 0.6 * 80 * GiB  # the weight shard may take at most 24 GiB
    picks = {}
    for size in ("0.5B", "7B", "14B", "32B", "72B"):
        arch = memory.architecture(f"Qwen/Qwen2.5-{size}")
        picks[size] = memory.choose_tp(arch, memory.tp_candidates(arch, 8), budget)
    # 7B: 14.2 GiB <= 24; 14B: 27.5 > 24, 13.8; 32B: 61.0, 30.5 > 24, 15.3; 72B: 135.4 / 8 = 16.9
    assert picks == {"0.5B": 1, "7B": 1, "14B": 2, "32B": 4, "72B": 8}
    assert memory.tp_candidates(memory.architecture("Qwen/Qwen2.5-7B"), 8) == [1, 2, 4]  # 28 heads


def test_rule_order_and_fixed_values():
    assert memory.deepspeed_candidates("auto", "auto") == [(2, False), (3, False), (2, True), (3, True)]
    assert memory.deepspeed_candidates(3, "auto") == [(3, False), (3, True)]
    assert memory.deepspeed_candidates("auto", False) == [(2, False), (3, False)]


# ------------------------------------------------------------------------------------------ refusals
def test_32b_on_zero2_is_refused_at_load_with_its_numbers():
    cfg = paper_cell("Qwen/Qwen2.5-32B", nodes=4, gpus_per_node=8, vllm_tp=2, zero_stage=2, adam_offload=False)
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    msg = str(info.value)
    assert isinstance(info.value, OpenRLHFConfigError) and "\n" not in msg
    assert "does not fit 80 GiB per GPU" in msg and "ZeRO-2, Adam offload off, vLLM TP 2" in msg
    # weights 65,527,752,704 B = 61.0 GiB; optimizer 12 x 32,763,876,352 / 32 = 11.4 GiB; logits 2 x 10240 x 152064 x
    # 14 B = 40.6 GiB; generation: 61.0 + 0.6 x 80 + 4 = 113.0 GiB
    assert "train    weights 61.0 + grads 1.9 + optimizer 11.4 +" in msg and "logits 40.6" in msg
    assert "= 142.4 / 80 GiB" in msg and "actor weights 61.0 + vLLM 48.0 + reserve 4.0 = 113.0 / 80 GiB" in msg
    assert "DOES NOT FIT" in msg and "openrlhf.zero_stage: auto" in msg


def test_nothing_fits_names_the_most_frugal_plan(tmp_path):
    cfg = paper_cell("Qwen/Qwen2.5-32B", micro=4, nodes=4, gpus_per_node=8, vllm_tp=2)
    with pytest.raises(OpenRLHFConfigError, match=r"ZeRO-3, Adam offload on.*no setting of ZeRO stage/offload fits"):
        build_plan(cfg, tmp_path)


def test_a_smaller_gpu_refuses_what_a_larger_one_runs(tmp_path):
    cfg = paper_cell("Qwen/Qwen2.5-7B", micro=1, nodes=1, gpus_per_node=8, zero_stage=2, adam_offload=False)
    assert build_plan(cfg, tmp_path).memory.plan.fits
    cfg["openrlhf"]["gpu_memory_gb"] = 40
    with pytest.raises(OpenRLHFConfigError, match=r"does not fit 40 GiB per GPU"):
        build_plan(cfg, tmp_path)


@pytest.mark.parametrize(
    "openrlhf,match",
    [
        ({"vllm_tp": 8}, r"openrlhf.vllm_tp: 8 does not split Qwen/Qwen2.5-7B's 28 attention heads"),
        ({"zero_stage": "most"}, r"openrlhf.zero_stage: expected a positive integer or auto, got 'most'"),
        ({"zero_stage": 4}, r"openrlhf.zero_stage: 4 is not allowed. Allowed: 0, 1, 2, 3, auto"),
        ({"adam_offload": "yes"}, r"openrlhf.adam_offload: 'yes' is not allowed"),
        ({"gpu_memory_gb": 0}, r"openrlhf.gpu_memory_gb: 0 must be > 0.0"),
        ({"extra_flags": {"--ds.adam_offload": True}}, r"--ds.adam_offload is set by openrlhf.adam_offload"),
    ],
)
def test_bad_memory_settings(tmp_path, openrlhf, match):
    with pytest.raises(OpenRLHFConfigError, match=match):
        build_plan(paper_cell("Qwen/Qwen2.5-7B", micro=1, nodes=1, gpus_per_node=8, **openrlhf), tmp_path)


def test_auto_needs_a_known_architecture(tmp_path):
    with pytest.raises(OpenRLHFConfigError, match=r"openrlhf.zero_stage: auto needs the model's architecture"):
        build_plan(paper_cell("org/never-seen-model", nodes=1, gpus_per_node=8), tmp_path)
    cfg = paper_cell("org/never-seen-model", nodes=1, gpus_per_node=8, zero_stage=2, adam_offload=False)
    text = launch_command(cfg, tmp_path)  # set explicitly: launched as asked, the plan says it was not checked
    assert "# memory plan (estimate per GPU; docs/gpu.md 'Memory plans'): not checked" in text


def test_offload_given_as_an_extra_flag_counts_in_the_plan(tmp_path):
    cfg = paper_cell("Qwen/Qwen2.5-7B", micro=1, nodes=1, gpus_per_node=8, zero_stage=2, adam_offload=False)
    cfg["openrlhf"]["extra_flags"] = {"--ds.adam_offload": True}
    plan = build_plan(cfg, tmp_path)
    assert plan.memory.adam_offload and plan.argv.count("--ds.adam_offload") == 1
    assert dict(plan.memory.plan.phase("train").terms)["optimizer"] == 0


def test_memory_settings_do_not_change_the_run_id():
    base = paper_cell("Qwen/Qwen2.5-7B", micro=1, nodes=1, gpus_per_node=8, zero_stage=2, adam_offload=False)
    changed = paper_cell(
        "Qwen/Qwen2.5-7B", micro=1, nodes=1, gpus_per_node=8, zero_stage=3, adam_offload=True, gpu_memory_gb=141
    )
    assert load_config(base).run_id() == load_config(changed).run_id()
    plain = paper_cell("Qwen/Qwen2.5-7B", micro=1, nodes=1, gpus_per_node=8)
    for key in ("zero_stage", "adam_offload"):
        del plain["openrlhf"][key]  # left unset: ZeRO-2, no offload (the defaults before the plan existed)
    assert load_config(plain).run_id() == load_config(base).run_id()
    assert parse_options({}).zero_stage == 2 and parse_options({}).adam_offload is False


# ------------------------------------------------------------------------------------------ dry runs
def test_train_dry_run_prints_the_plan(tmp_path, capsys):
    import yaml

    from harness.cli import main

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(paper_cell("Qwen/Qwen2.5-32B", nodes=4, gpus_per_node=8, vllm_tp=2)))
    assert main(["train", str(path), "--dry-run", "--run-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "--ds.zero_stage 3 \\\n    --ds.adam_offload \\" in out
    assert "#   ZeRO-3, Adam offload on, vLLM TP 2 (rule for zero_stage, adam_offload)" in out
    for phase in ("train", "rollout", "generate", "host"):
        assert f"\n#   {phase} " in out


def test_paper_sweep_dry_run_shows_a_fitting_plan_for_every_cell(tmp_path, capsys):
    from harness.cli import main

    assert main(["sweep", str(ROOT / "sweeps" / "paper_qwen25.yaml"), "--dry-run", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    cells = out.split("\n  qwen2.5-")[1:]
    assert len(cells) == 24
    for cell in cells:
        assert "# memory plan (estimate per GPU" in cell and "DOES NOT FIT" not in cell
        zero = "ZeRO-2, Adam offload off" if cell.startswith("7b") else "ZeRO-3, Adam offload on"
        assert f"#   {zero}, vLLM TP 2" in cell
        assert cell.count("/ 80 GiB") == 3  # train, rollout, generate
