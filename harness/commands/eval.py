"""``harness eval --model M --suites S``: generate, grade and score a model on benchmark suites (or lm-eval tasks)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from harness.commands._common import make_sandbox, positive

ORDER = 70

VLLM_FLAGS = ("tensor_parallel_size", "data_parallel_size", "gpu_memory_utilization", "max_model_len")


def register(sub) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a model on benchmark suites (generate, grade, avg@k/pass@k)",
        description="Evaluate a model on suites. Generations are appended to "
        "OUT/<suite>.generations.jsonl as they come; rerunning continues there.",
    )
    p.add_argument("--model", help="local HF model dir, hub id, or path/to/model.gguf")
    p.add_argument("--suites", help="comma-separated suite names (see --list-suites)")
    p.add_argument("--list-suites", action="store_true", help="print the suites with their protocols and exit")
    p.add_argument("--engine", default="hf", help="hf (CPU/GPU, default) or vllm (GPU)")
    p.add_argument("--n", type=int, help="samples per problem (default: the suite's; AIME/AMC 32, else 1)")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--max-tokens", type=int, help="max new tokens (default 8192)")
    p.add_argument("--data-dir", help="directory with <suite>.jsonl/.jsonl.gz/.json/.parquet (overrides the hub)")
    p.add_argument("--fixtures", action="store_true", help="use the tiny shipped fixture subsets (tests/demos)")
    p.add_argument("--limit", type=int, help="first N problems of each suite")
    p.add_argument("--template", help="prompt template name (boxed, prime_math, raw, code_function, ...)")
    p.add_argument("--out", help="output directory (default evals_out/<model name>)")
    p.add_argument("--batch-size", type=int, default=8, help="hf engine batch size")
    p.add_argument("--device", help="hf engine device (default cuda if available else cpu)")
    p.add_argument("--threads", type=int, help="hf engine: torch CPU threads (default: torch's choice)")
    chat = p.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=None, help="force the chat template")
    chat.add_argument("--no-chat", dest="chat", action="store_false", help="raw prompts, no chat template")
    p.add_argument("--tensor-parallel-size", type=int, help="vllm engine: GPUs per engine (default 1)")
    p.add_argument(
        "--data-parallel-size",
        type=int,
        help="vllm engine: engines, one process per group of --tensor-parallel-size GPUs (default 1)",
    )
    p.add_argument(
        "--gpu-memory-utilization", type=float, help="vllm engine: fraction of each GPU's memory (default 0.85)"
    )
    p.add_argument(
        "--max-model-len", type=int, help="vllm engine: context length, prompt + new tokens (default: the model's)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, help="grading processes/threads (default: CPU count)")
    p.add_argument("--sandbox-python", help="interpreter for code (default /usr/bin/python3)")
    p.add_argument(
        "--lm-eval-tasks",
        help="run these lm-eval tasks through our engine instead of --suites "
        "(our suites are available as harness_<suite>)",
    )
    p.add_argument("--include-path", help="extra lm-eval task directory (with --lm-eval-tasks)")
    p.add_argument("--lm-eval-metadata", help='JSON passed to lm-eval tasks, e.g. \'{"data_dir": "data/"}\'')
    p.set_defaults(func=run)


def _print_suites() -> int:
    from harness.evals.suites import SUITES, list_suites

    for name in list_suites():
        s = SUITES.get(name)
        pr = s.protocol
        print(
            f"{name:16s} {s.kind:6s} n={pr.n_samples:<3d} T={pr.temperature:<4g} top_p={pr.top_p:<4g} "
            f"max_tokens={pr.max_tokens:<5d} {s.hf_id}  {s.note}"
        )
    return 0


def check_eval_args(args) -> None:
    """Every value that would make an eval meaningless is refused before any model is loaded."""
    if args.suites and args.lm_eval_tasks:
        raise ValueError(
            "--suites and --lm-eval-tasks are two separate evaluations; give one of them (our suites "
            "are available to lm-eval as harness_<suite>)"
        )
    positive(
        args,
        (
            "n",
            "max_tokens",
            "limit",
            "batch_size",
            "threads",
            "workers",
            "tensor_parallel_size",
            "data_parallel_size",
            "max_model_len",
        ),
    )
    if args.engine != "vllm":
        given = [f for f in VLLM_FLAGS if getattr(args, f, None) is not None]
        if given:
            flags = ", ".join("--" + f.replace("_", "-") for f in given)
            raise ValueError(f"{flags}: vllm engine option(s); add --engine vllm or drop them")
    gmu = getattr(args, "gpu_memory_utilization", None)
    if gmu is not None and not 0 < gmu <= 1:
        raise ValueError(f"--gpu-memory-utilization {gmu}: allowed 0 < value <= 1")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise ValueError(f"--top-p {args.top_p}: allowed 0 < top_p <= 1")
    if args.temperature is not None and not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise ValueError(f"--temperature {args.temperature}: must be >= 0 and finite (0 = greedy)")
    from harness.run.rundir import check_output_place

    if args.out:
        check_output_place(args.out, "--out")
    elif args.model:  # the default output folder follows the same rule
        check_output_place(default_out(args.model), "--out (default)")
    if args.model:  # a missing model is named before the suites resolve (an exported run brings its own suite)
        from harness.evals.engines import check_model_path, split_model_path

        check_model_path(split_model_path(args.model)[0])


def default_out(model: str) -> str:
    """``evals_out/<model name>``: where ``harness eval`` writes without ``--out``."""
    return os.path.join("evals_out", Path(model.rstrip("/")).name)


def engine_kwargs(args, chat=None) -> dict:
    """The engine's keyword arguments from the command line (None = the engine's default)."""
    kw = {"chat": args.chat if chat is None else chat}
    if args.engine == "hf":
        kw.update(batch_size=args.batch_size, device=args.device, threads=args.threads)
    elif args.engine == "vllm":
        kw.update(seed=args.seed, **{f: getattr(args, f, None) for f in VLLM_FLAGS})
    return kw


def _check_context_length(args, suite) -> None:
    """--max-model-len must leave room for the prompt and the protocol's new tokens (else vLLM would cut
    generations short of max_tokens: a silent protocol change)."""
    limit = getattr(args, "max_model_len", None)
    if limit is None:
        return
    max_tokens = suite.protocol.with_overrides(max_tokens=args.max_tokens).max_tokens
    if limit <= max_tokens:
        raise ValueError(
            f"--max-model-len {limit} leaves no room for the prompt: suite {suite.name} generates up to "
            f"{max_tokens} new tokens; raise --max-model-len above {max_tokens} (prompt + new tokens) or lower "
            "--max-tokens"
        )


def run(args) -> int:
    if args.list_suites:
        return _print_suites()
    check_eval_args(args)
    if args.lm_eval_tasks:
        return _cmd_lm_eval(args)
    if not args.model or not args.suites:
        raise ValueError("harness eval needs --model and --suites (or --list-suites, or --lm-eval-tasks)")
    from harness.backends import register_model_suite
    from harness.evals.engines import make_engine
    from harness.evals.evaluate import evaluate
    from harness.evals.suites import SUITES, resolve_suites

    register_model_suite(SUITES, args.model)  # an exported run (`harness export`) brings its own task suite
    suites = resolve_suites(args.suites)
    for s in suites:  # validate protocol overrides and data before loading a model
        s.protocol.with_overrides(
            n_samples=args.n, temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens
        )
        s.load(data_dir=args.data_dir, fixtures=args.fixtures, limit=args.limit, template=args.template)
        _check_context_length(args, s)
    sandbox = None
    if any(s.kind == "code" for s in suites):
        sandbox = make_sandbox(args.sandbox_python, args.workers, None)
    try:
        engine = make_engine(args.engine, args.model, **engine_kwargs(args))
    except BaseException:
        if sandbox is not None:
            sandbox.close()
        raise
    out = args.out or default_out(args.model)
    try:
        summary = evaluate(
            engine,
            suites,
            out,
            n=args.n,
            temperature=args.temperature,
            top_p=args.top_p,
            max_tokens=args.max_tokens,
            data_dir=args.data_dir,
            fixtures=args.fixtures,
            limit=args.limit,
            template=args.template,
            seed=args.seed,
            workers=args.workers,
            sandbox=sandbox,
        )
    finally:
        engine.close()
        if sandbox is not None:
            sandbox.close()
    attach_to_run(Path(out) / "results.json", args.model)
    for name in [s.name for s in suites]:
        r = summary["suites"][name]
        m = r["metrics"]
        extra = "  ".join(f"{k}={v:.4f}" for k, v in m.items() if not k.endswith("_stderr") and k != r["primary"])
        print(
            f"{name:16s} {r['primary']}={m[r['primary']]:.4f} ± {m.get(r['primary'] + '_stderr', 0):.4f}  "
            f"(n_problems={r['n_problems']}, n={r['n_samples']}, T={r['temperature']:g}, top_p={r['top_p']:g}, "
            f"max_tokens={r['max_tokens']})  {extra}"
        )
    print(f"results: {Path(out) / 'results.json'}")
    return 0


def attach_to_run(results_path: Path, model: str) -> None:
    """A model directory exported from a run (``harness_run.json``) gives its results the run's identity (run id,
    method, seed, step), so tables show them under that method and seed instead of an anonymous eval-only row."""
    from harness.io import atomic_write_json
    from harness.run.records import read_model_run

    run = read_model_run(model) if Path(model).is_dir() else None
    if run is None:
        return
    summary = json.loads(results_path.read_text())
    if summary.get("run") not in (None, run):
        raise ValueError(f"{results_path} holds results of run {summary['run'].get('run_id')}; use another --out")
    summary["run"] = run
    atomic_write_json(results_path, summary)
    print(f"attached to run {run['run_id']} ({run['method']}, seed {run['seed']}, step {run['step']})")


def lm_eval_gen_kwargs(args) -> dict:
    """The generation flags ``--lm-eval-tasks`` passes to lm-eval (``gen_kwargs``: they update every generation
    task's ``generation_kwargs``); ``--n`` is refused by name (an lm-eval task sets its samples per problem in its
    config, ``repeats``, which its metrics and filters depend on). ``--tensor-parallel-size`` and the other vllm
    flags go to the engine (``engine_kwargs``)."""
    from harness.evals.lm_eval_bridge import gen_kwargs_of

    if args.n is not None:
        raise ValueError(
            f"--n {args.n}: not passed to lm-eval tasks, which set their samples per problem in their task config "
            "(repeats; harness_aime24: 32); drop --n, or score our suites with --suites"
        )
    return gen_kwargs_of(args.temperature, args.top_p, args.max_tokens)


def _cmd_lm_eval(args) -> int:
    from harness import provenance
    from harness.evals.engines import make_engine
    from harness.evals.lm_eval_bridge import run_lm_eval, write_lm_eval_output

    if not args.model:
        raise ValueError("--lm-eval-tasks needs --model")
    gen_kwargs = lm_eval_gen_kwargs(args)
    try:
        meta = json.loads(args.lm_eval_metadata) if args.lm_eval_metadata else {}
    except ValueError as e:
        raise ValueError(f"--lm-eval-metadata is not valid JSON: {e}") from None
    if args.data_dir:
        meta.setdefault("data_dir", args.data_dir)
    if args.fixtures:
        meta.setdefault("fixtures", True)
    if args.template:
        meta.setdefault("template", args.template)
    kwargs = engine_kwargs(args, chat=False)  # with --chat, lm-eval renders the template (HarnessLM), not the engine
    engine = make_engine(args.engine, args.model, **kwargs)
    tasks = [t.strip() for t in args.lm_eval_tasks.split(",") if t.strip()]
    try:
        res = run_lm_eval(
            engine,
            tasks,
            include_path=args.include_path,
            limit=args.limit,
            metadata=meta,
            apply_chat_template=bool(args.chat),
            gen_kwargs=gen_kwargs,
        )
    finally:
        engine.close()
    out = Path(args.out or default_out(args.model))
    out.mkdir(parents=True, exist_ok=True)
    info = {
        "model": args.model,
        "engine": args.engine,
        "engine_options": {k: v for k, v in kwargs.items() if v is not None},
        "gen_kwargs": gen_kwargs,
        "apply_chat_template": bool(args.chat),
        "tasks": tasks,
        "limit": args.limit,
        "provenance": provenance.collect(),
    }
    write_lm_eval_output(res, out, info)
    for task, metrics in res["results"].items():
        shown = "  ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        print(f"{task:24s} {shown}")
    print(f"results: {out / 'lm_eval_results.json'} (samples: {out}/lm_eval_samples_<task>.jsonl)")
    return 0
