"""Check 1, environment: the device, torch/transformers versions, which optional packages and which harness
modules import here. Imports are tried in a child interpreter (a failing or slow import cannot touch this one)."""

from __future__ import annotations

import json
import subprocess
import sys

# optional packages the harness or the OpenRLHF path can use; the GPU machine promises none of them
OPTIONAL = (
    "submitit",
    "math_verify",
    "latex2sympy2_extended",
    "antlr4",
    "lm_eval",
    "datasets",
    "scipy",
    "gguf",
    "tensorboard",
    "wandb",
    "accelerate",
    "safetensors",
    "pandas",
    "seaborn",
    "yaml",
    "tqdm",
    "pytest",
    "pytest_timeout",
    "peft",
    "deepspeed",
    "pydantic",
    "pylatexenc",
    "torchdata",
    "aiohttp",
    "ray",
    "vllm",
    "flash_attn",
    "openrlhf",
)
# harness entry points: which of them import with the packages present
HARNESS_MODULES = (
    "harness",
    "harness.run.runner",
    "harness.backends.pocket.trainer",
    "harness.cli",
    "harness.commands.sweep",
    "harness.sweeps.submit",
    "harness.evals.math_grader",
    "harness.evals.metrics",
    "harness.results.table",
    "harness.backends.openrlhf.plugin",
)

PROBE = r"""
import importlib, importlib.metadata as md, json, sys, time
out = {}
for name in sys.argv[1].split(","):
    t0 = time.time()
    try:
        mod = importlib.import_module(name)
        ver = getattr(mod, "__version__", None)
        if ver is None:
            try:
                ver = md.version(name.split(".")[0].replace("_", "-"))
            except Exception:
                ver = None
        out[name] = {"ok": True, "version": str(ver) if ver is not None else None}
    except BaseException as e:
        out[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
    out[name]["import_s"] = round(time.time() - t0, 2)
print("@@" + json.dumps(out))
"""


def probe_imports(names, timeout=300) -> dict:
    """Import each name in one child interpreter (same flags as this one); {name: {ok, version|error}}."""
    cmd = [sys.executable] + (["-S"] if sys.flags.no_site else []) + ["-c", PROBE, ",".join(names)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {n: {"ok": False, "error": f"probe timed out after {timeout}s"} for n in names}
    for line in proc.stdout.splitlines():
        if line.startswith("@@"):
            return json.loads(line[2:])
    return {n: {"ok": False, "error": f"probe failed: {proc.stderr[-300:]}"} for n in names}


def probe_cli(timeout=120) -> dict:
    """``python -m harness methods``: every command module imports (submitit only on submit)."""
    cmd = [sys.executable] + (["-S"] if sys.flags.no_site else []) + ["-m", "harness", "methods"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout}s"}
    if proc.returncode == 0:
        return {"ok": True}
    return {"ok": False, "returncode": proc.returncode, "error": (proc.stderr.strip().splitlines() or [""])[-1][:300]}


def check(ctx) -> dict:
    import torch
    import transformers

    res = {
        "status": "ok",
        "device": ctx.device,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda_available": torch.cuda.is_available(),
        "torch_cuda": torch.version.cuda,
        "cpu_threads": torch.get_num_threads(),
    }
    if ctx.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(ctx.device)
        res.update(
            gpu_name=props.name,
            gpu_capability=f"{props.major}.{props.minor}",
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            gpu_multiprocessors=props.multi_processor_count,
            cudnn=torch.backends.cudnn.version(),
            tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
        )
    imports = probe_imports(OPTIONAL + HARNESS_MODULES)
    res["packages"] = {n: imports[n] for n in OPTIONAL}
    res["harness_modules"] = {n: imports[n] for n in HARNESS_MODULES}
    res["missing_packages"] = [n for n in OPTIONAL if not imports[n]["ok"]]
    res["harness_modules_failing"] = {n: imports[n]["error"] for n in HARNESS_MODULES if not imports[n]["ok"]}
    res["cli"] = probe_cli()
    ctx.log(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{res.get('gpu_name', 'no GPU')}; missing: {', '.join(res['missing_packages']) or 'none'}; "
        f"`python -m harness methods`: {'ok' if res['cli']['ok'] else res['cli']['error']}"
    )
    # the checks below need these; anything else missing is reported, not fatal
    core = ("harness", "harness.run.runner", "harness.backends.pocket.trainer")
    bad = [n for n in core if not imports[n]["ok"]]
    if bad:
        res["status"] = "fail"
        res["reason"] = f"core harness modules do not import: {', '.join(bad)}"
    return res
