"""The OpenRLHF launcher's tracker flags for a run's ``logging:`` section (moved from harness.run.tracking)."""

from harness.backends.openrlhf.logger import logger_flags


def test_logger_flags_carry_entity_project_group():
    logging = {"tensorboard": True, "wandb": True, "wandb_project": "p", "wandb_entity": "lab", "wandb_group": "sw"}
    argv = logger_flags(logging, "/runs/cell")
    assert argv == [
        "--logger.tensorboard_dir",
        "/runs/cell/tensorboard",
        "--logger.wandb.key",
        "${WANDB_API_KEY}",
        "--logger.wandb.project",
        "p",
        "--logger.wandb.org",
        "lab",
        "--logger.wandb.group",
        "sw",
        "--logger.wandb.run_name",
        "cell",
    ]
    assert logger_flags({"wandb": False}, "/runs/cell") == []
    plain = logger_flags({"wandb": True, "wandb_project": "p"}, "/r/c")
    assert "--logger.wandb.org" not in plain and "--logger.wandb.group" not in plain
