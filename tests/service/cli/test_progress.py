"""What `gpuq ls`, `gpuq show` and `gpuq watch` say of where a job is: `epoch 2/4 38%` with a
total, `epoch 27 · val_loss 0.152` for a job that reports epochs alone (`gpuq.report`)."""

import pytest

from gpuq.http import Client
from service.cli import tables
from service.cli.job_summary import job_summary
from service.cli.main import main
from service.cli.tables import headline_metric, metric_value, progress_text
from service.cli.watch import progress_line
from service.jobs.writes import JOB
from tests.conftest import command_spec

METRICS = {"loss": 0.2, "val_loss": 0.1523, "acc": 0.91}


def job(progress, metrics=METRICS, **fields):
    return {"id": 4, "name": "cmd", "kind": "command", "owner": "ana", "status": "running",
            "assigned_gpus": [], "created_at": "2025-01-02T03:04:05+00:00",
            "progress": progress, "metrics": metrics, **fields}  # fmt: skip


def test_a_total_gives_epoch_of_epochs_and_the_share_done_as_before():
    assert progress_text(job({"epoch": 2, "epochs": 4, "fraction": 0.38})) == "epoch 2/4 38%"
    assert progress_text(job({"epoch": 2, "epochs": 4})) == "epoch 2/4"


def test_epochs_without_a_total_give_the_latest_epoch_and_the_headline_metric():
    assert progress_text(job({"epoch": 27})) == "epoch 27 · val_loss 0.152"
    assert progress_text(job({"epoch": 27}), "acc") == "epoch 27 · acc 0.91"
    assert progress_text(job({"epoch": 3}, {"mae": None})) == "epoch 3 · mae nan"
    assert progress_text(job({"epoch": 3}, {})) == "epoch 3"
    assert progress_text(job({"epoch": 3, "fraction": 0.5})) == "epoch 3 50%"  # a share: a bar


def test_nothing_reported_yet_gives_nothing():
    assert progress_text(job({})) == ""
    assert progress_text(job({"epoch": None, "epochs": None})) == ""


@pytest.mark.parametrize(
    ("metrics", "sweep_metric", "shown"),
    [
        (METRICS, "acc", "acc"),  # the sweep's metric first
        (METRICS, "f1", "val_loss"),  # ...if the member reports it
        (METRICS, None, "val_loss"),
        ({"acc": 0.9, "loss": 0.3}, None, "loss"),
        ({"acc": 0.9, "mae": 0.3}, None, "acc"),  # else the first reported
        ({}, None, None),
    ],
)
def test_the_headline_metric_is_the_sweeps_then_val_loss_then_loss_then_the_first(
    metrics, sweep_metric, shown
):
    assert headline_metric(metrics, sweep_metric) == shown


def test_metric_values_keep_three_significant_digits():
    assert [metric_value(v) for v in (0.1523, 0.2, 1234.5, 2.5e-5, None)] == [
        "0.152", "0.2", "1230", "2.5e-05", "nan"
    ]  # fmt: skip


def test_ls_show_and_watch_show_no_bar_for_epochs_without_a_total():
    untold = job({"epoch": 27})
    row = tables.plain(tables.jobs_table([untold])).splitlines()[1]
    assert "epoch 27 · val_loss 0.152" in row and "%" not in row
    assert "  progress: epoch 27 · val_loss 0.152" in job_summary(untold).splitlines()
    assert progress_line(untold) == "job 4 running: epoch 27 · val_loss 0.152"
    told = job({"epoch": 2, "epochs": 4, "fraction": 0.38})
    assert "epoch 2/4 38%" in tables.plain(tables.jobs_table([told]))
    assert progress_line(told).startswith("job 4 running [#########...............]  38%")


def test_ls_and_show_head_a_sweep_members_progress_with_the_sweeps_metric(api, db, capsys):
    spec = {**command_spec("pass", gpus=0), "sweep": {"parameters": {"n": [1]}, "metric": "acc"}}
    member = api.post("/v1/sweeps", json=spec).json()["members"][0]["job_id"]
    alone = api.post("/v1/jobs", json=command_spec("pass", gpus=0)).json()["id"]
    with db.write() as session:
        for job_id in (member, alone):
            update = JOB.update().where(JOB.c.id == job_id)
            session.connection().execute(update.values(progress={"epoch": 27}, metrics=METRICS))

    def gpuq(*args: str) -> str:
        assert main(list(args), api=Client(http=api)) == 0
        return capsys.readouterr().out

    rows = {line.split()[0]: line for line in gpuq("ls").splitlines()[1:]}
    assert "epoch 27 · acc 0.91" in rows[str(member)]
    assert "epoch 27 · val_loss 0.152" in rows[str(alone)]
    assert "  progress: epoch 27 · acc 0.91" in gpuq("show", str(member)).splitlines()
