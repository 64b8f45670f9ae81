"""``harness stage SPEC [--to DIR] [--source hub|DIR] [--verify]``: put every input a sweep reads on shared storage
(models, eval suites, the in-loop eval sets, hashes of local files) with a manifest, so its jobs run offline."""

from __future__ import annotations

import argparse
from pathlib import Path

ORDER = 44


def register(sub) -> None:
    p = sub.add_parser(
        "stage",
        help="put every model, eval suite and data file a sweep reads on shared storage, for offline jobs",
        description="Stage a sweep's inputs into DIR (--to, or the spec's stage_dir): hub models into DIR/hub (a "
        "Hugging Face cache), eval suites into DIR/suites at a resolved commit, the files a backend renders for "
        "every run, and DIR/manifest.json with every revision and sha256. A spec with `stage_dir: DIR` runs its "
        "jobs with the hub offline, reading only these (docs/gpu.md).",
    )
    p.add_argument("spec", help="sweep spec YAML")
    p.add_argument("--to", type=Path, metavar="DIR", help="the stage directory (default: the spec's stage_dir)")
    p.add_argument(
        "--source",
        default="hub",
        metavar="hub|DIR",
        help="hub (default: download), or a local folder holding <org>/<name>/ copies of the hub repos",
    )
    p.add_argument(
        "--verify", action="store_true", help="stage nothing: re-hash every staged input against the manifest"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.sweeps.expand import expand
    from harness.sweeps.spec import load_spec
    from harness.sweeps.stager import stage_sweep, verify
    from harness.sweeps.staging import needs, stage_dir_of

    spec = load_spec(args.spec)
    cells = expand(spec)
    declared = stage_dir_of(spec)
    stage = (args.to.expanduser().absolute() if args.to else None) or declared
    if stage is None:
        raise ValueError(f"{args.spec}: no stage_dir in the spec; give --to DIR (then add `stage_dir: DIR` to it)")
    if args.verify:
        lines = verify(stage, needs(cells))
        for line in lines:
            print(f"FAIL {line}")
        print(f"{stage}: {len(lines)} input(s) differ from the manifest" if lines else f"{stage}: every input verified")
        return 1 if lines else 0
    manifest = stage_sweep(spec, cells, stage, source=args.source)
    wanted = {(n.kind, n.name) for n in needs(cells)}
    shown = [e for e in manifest["inputs"] if (e["kind"], e["name"]) in wanted]
    print(f"\n{stage}/manifest.json: {len(shown)} inputs of sweep {spec.name}")
    for e in shown:
        rev = e.get("revision") or "-"
        print(f"  {e['kind']:6s} {e['name']:40s} {e['bytes'] / 2**20:10.1f} MiB  {rev[:40]:40s} {e['sha256'][:16]}")
    if declared != stage:
        print(f"\nadd `stage_dir: {stage}` to {args.spec}: its jobs then read only these, with the hub offline")
    return 0
