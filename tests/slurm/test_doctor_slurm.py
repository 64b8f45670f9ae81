"""`harness doctor --slurm` on the real single-node SLURM cluster (marker `slurm`): the doctor runs as a one-node job
on each partition (asking for the GPUs its nodes advertise: the test cluster's two fake ones), and the reports come
back here, one per partition."""

import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from tests.helpers import sweep_targets as testing

pytestmark = pytest.mark.slurm


def test_doctor_runs_on_one_node_of_each_partition(slurm_cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the jobs' folder (.harness-doctor/) and the spec: on storage the node shares
    Path("spec.yaml").write_text(yaml.safe_dump({"name": "doc", "base": testing.tiny_pocket_base(), "seeds": [0]}))
    rc = main(["doctor", "--cpu", "--slurm", "--spec", "spec.yaml", "--need-gb", "0.001", "--json", "all.json"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0, out
    reports = json.loads(Path("all.json").read_text())["partitions"]
    assert list(reports) == ["debug"]  # scripts/slurm/cluster.sh: one partition
    (doc,) = reports.values()
    assert doc["mode"] == "cpu" and doc["spec"] == "spec.yaml" and doc["summary"]["FAIL"] == []
    assert doc["summary"]["ok"] == ["disk", "staged"]
    assert [line for line in out if line.startswith("[debug] ")][
        0
    ] == "[debug] skipped gpus          --cpu: GPU checks are not run"
    assert out[-2] == "no check failed on 1 partition(s)" and out[0].startswith("partition debug: job ")
    assert main(["doctor", "--cpu", "--slurm", "--partitions", "gpux"]) == 2
    assert "error: --partitions: unknown partition 'gpux'. Known partitions: debug" in capsys.readouterr().err
