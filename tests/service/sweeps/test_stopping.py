"""The median stopping rule on recorded histories: pure, so every case is a table."""

from service.sweeps.stopping import HopelessMember, explain, hopeless

#: val_loss per epoch of the four members of a real sweep (`GET /v1/sweeps/3/metrics`): an
#: MLP of 16 units on 2048 synthetic samples, learning rates 0.003, 0.001, 0.0001 and 10.0
GOOD = {1: 0.8075, 2: 0.3668, 3: 0.1896, 4: 0.1286}
FINE = {1: 1.3967, 2: 1.0719, 3: 0.8303, 4: 0.6456}
SLOW = {1: 1.8, 2: 1.7499, 3: 1.7014, 4: 1.6547}
WILD = {1: 14742.4941, 2: 689.0029, 3: 125.7003, 4: 37.3055}
#: a loss that went to NaN after its first epoch (stored as null)
DIVERGED = {1: 3.9e7, 2: None, 3: None}


def judge(histories, running, **rule):
    rule = {"mode": "min", "grace_epochs": 1, "min_members": 2, **rule}
    return {v.job_id: v for v in hopeless(histories, running, **rule)}


def test_a_member_with_a_wild_learning_rate_is_stopped_at_its_first_judged_epoch():
    stopped = judge({1: GOOD, 2: FINE, 3: SLOW, 4: WILD}, running={1, 2, 3, 4})
    assert set(stopped) == {3, 4}  # SLOW trails too: 1.65 against a median of 0.65
    assert stopped[4].epoch == 4 and stopped[4].best == 37.3055
    assert stopped[4].median == FINE[4]


def test_a_diverged_member_trails_the_median_and_is_stopped():
    stopped = judge({1: GOOD, 2: FINE, 3: DIVERGED}, running={3})
    verdict = stopped[3]
    assert (verdict.epoch, verdict.others) == (3, 2)
    assert verdict.best == 3.9e7  # its best so far was a number once
    assert verdict.median == (GOOD[3] + FINE[3]) / 2


def test_a_member_as_good_as_the_median_goes_on():
    assert judge({1: GOOD, 2: FINE, 3: SLOW}, running={1, 2}) == {}
    # FINE, judged against GOOD and SLOW at epoch 4: median 0.89; its best 0.65 is better.


def test_a_slow_member_is_stopped_once_enough_others_reached_its_epoch():
    assert judge({1: GOOD, 3: SLOW}, running={3}) == {}  # one other: not enough
    assert judge({1: GOOD, 2: FINE, 3: SLOW}, running={3})[3].epoch == 4


def test_no_member_is_judged_before_its_grace_epochs():
    early = {1: {1: 1.0}, 2: {1: 1.1}, 3: {1: 99.0}}
    assert judge(early, running={3}, grace_epochs=2) == {}
    assert 3 in judge(early, running={3}, grace_epochs=1)


def test_it_judges_at_the_latest_epoch_the_others_reached():
    ahead = {1: GOOD, 2: {1: 1.0, 2: 0.9}, 3: {1: 5.0, 2: 4.0, 3: 3.0, 4: 2.0}}
    verdict = judge(ahead, running={3})[3]
    assert verdict.epoch == 2 and verdict.others == 2


def test_ended_members_count_and_only_running_ones_are_stopped():
    assert judge({1: GOOD, 2: FINE, 3: SLOW}, running=set()) == {}


def test_a_metric_to_maximise():
    accuracy = {1: {1: 0.6, 2: 0.8}, 2: {1: 0.55, 2: 0.75}, 3: {1: 0.1, 2: 0.12}}
    assert set(judge(accuracy, running={1, 2, 3}, mode="max")) == {3}


def test_a_median_that_is_no_number_stops_no_one():
    wild = {1: DIVERGED, 2: DIVERGED, 3: SLOW}
    assert judge(wild, running={3}) == {}


def test_the_message_says_by_how_much():
    said = explain(HopelessMember(3, 2, 1.5, 0.5, 2), "val_loss")
    assert said == (
        "stopped early at epoch 2 by its sweep's median rule: its best val_loss 1.5 trailed "
        "the median 0.5 of 2 other member(s) at that epoch by 1"
    )
    assert "never a number" in explain(HopelessMember(3, 2, None, 0.5, 2), "val_loss")
