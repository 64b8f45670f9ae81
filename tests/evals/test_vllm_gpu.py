"""GPU: the vLLM engine gives the same greedy verdicts as the HF engine on the tiny self-trained model."""

import pytest

pytestmark = pytest.mark.gpu


def test_vllm_engine_matches_hf(tiny_model, tiny_data, tmp_path):
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from harness.evals.engines import VLLMEngine
    from harness.evals.evaluate import evaluate
    from harness.evals.suites import get_suite

    engine = VLLMEngine(tiny_model, max_model_len=128, gpu_memory_utilization=0.3, chat=False)
    res = evaluate(
        engine,
        [get_suite("math500")],
        tmp_path / "out",
        data_dir=str(tiny_data),
        template="raw",
        max_tokens=16,
        progress=False,
    )
    assert res["suites"]["math500"]["metrics"]["avg@1"] == pytest.approx(0.5)
    res = evaluate(
        engine,
        [get_suite("math500")],
        tmp_path / "sampled",
        data_dir=str(tiny_data),
        template="raw",
        max_tokens=16,
        n=4,
        temperature=0.6,
        progress=False,
    )
    assert res["suites"]["math500"]["n_samples"] == 4 and "pass@4" in res["suites"]["math500"]["metrics"]
