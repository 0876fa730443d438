from service.scheduler.outcome import classify
from service.states import JobStatus, Reason


def judge(exit_info, failure=None, stop=None, limit=None):
    return classify(
        exit_info=exit_info, worker_failure=failure, stop_reason=stop, time_limit_s=limit
    )


def test_exit_zero_succeeds():
    outcome = judge({"exit_code": 0, "signal": None})
    assert (outcome.status, outcome.reason, outcome.exit_code) == (JobStatus.succeeded, None, 0)


def test_a_missing_exit_record_means_the_worker_was_lost():
    assert judge(None).reason == Reason.worker_lost


def test_death_by_signal_names_the_signal():
    outcome = judge({"exit_code": None, "signal": 9})
    assert outcome.reason == Reason.signal
    assert "SIGKILL" in outcome.message and "out of memory" in outcome.message


def test_the_workers_own_diagnosis_wins_and_gets_a_hint():
    outcome = judge({"exit_code": 67}, failure=("gpu_oom", "OOM when allocating tensor"))
    assert outcome.reason == Reason.gpu_oom
    assert outcome.message == "OOM when allocating tensor: lower batch_size or raise memory_mb"


def test_an_unknown_exit_code_is_a_nonzero_exit():
    outcome = judge({"exit_code": 3})
    assert (outcome.status, outcome.reason) == (JobStatus.failed, Reason.nonzero_exit)
    assert "code 3" in outcome.message


def test_stops_by_the_scheduler_decide_the_state_whatever_the_exit():
    assert judge(None, stop=Reason.cancelled_by_user).status == JobStatus.cancelled
    timed_out = judge({"exit_code": 75}, stop=Reason.time_limit, limit=60)
    assert (timed_out.status, timed_out.reason) == (JobStatus.timed_out, Reason.time_limit)
    assert "60 s" in timed_out.message


def test_a_kill_by_the_kernels_oom_killer_is_host_oom():
    outcome = judge({"exit_code": None, "signal": 9, "oom_killed": True})
    assert (outcome.status, outcome.reason) == (JobStatus.failed, Reason.host_oom)
    assert outcome.message.endswith("lower batch_size or use a smaller data set")
