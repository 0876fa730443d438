from gpuq.contract.crash_site import crash_site

#: the end of a builtin job's log that crashed in TensorFlow's own thread (issue 46)
OUTSIDE_PYTHON = """\
gpuq: epoch 8/15 (1.5s, 2465.7 samples/s) loss=0.03556 val_loss=0.09412
Fatal Python error: Segmentation fault

Thread 0x00007f4535ff86c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/usr/lib/python3.11/threading.py", line 629 in wait
  File "/work/main/worker/step_watchdog.py", line 47 in _watch
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Thread 0x00007f458e438b80 (most recent call first):
  File "/v/lib/python3.11/site-packages/keras/src/trainers/epoch_iterator.py", line 99 in reset
  File "/v/site-packages/keras/src/backend/tensorflow/trainer.py", line 489 in evaluate
  File "/work/main/worker/train.py", line 124 in train
  File "<frozen runpy>", line 198 in _run_module_as_main

Extension modules: numpy._core._multiarray_umath, h5py._errors (total: 2)
""".splitlines()

IN_PYTHON = """\
Fatal Python error: Segmentation fault

Thread 0x00007f4535ff86c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait

Current thread 0x00007f458e438b80 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "<string>", line 1 in <module>
""".splitlines()


def test_the_crashing_threads_innermost_frame_is_the_site():
    assert crash_site(IN_PYTHON) == ("string_at (/usr/lib/python3.11/ctypes/__init__.py:519)", True)


def test_a_crash_outside_python_names_where_the_main_thread_was():
    assert crash_site(OUTSIDE_PYTHON) == (
        "reset (keras/src/trainers/epoch_iterator.py:99)",
        False,
    )


def test_no_dump_no_site():
    assert crash_site([]) is None
    assert crash_site(["gpuq: epoch 1/2 loss=1", "Traceback (most recent call last):"]) is None
    # Frames of a traceback, not of a dump: no thread's header before them.
    assert crash_site(['  File "/x.py", line 3 in f']) is None


def test_only_the_last_dump_counts():
    earlier = [line.replace("string_at", "earlier") for line in IN_PYTHON]
    assert crash_site([*earlier, "more output", *OUTSIDE_PYTHON])[0].startswith("reset ")


def test_a_dump_cut_off_at_its_start_still_gives_the_frames_left():
    assert crash_site(OUTSIDE_PYTHON[8:])[0].startswith("reset ")


def test_the_nodes_prefix_on_a_multi_node_log_is_read_through():
    lines = [f"[gpu-n2] {line}" for line in IN_PYTHON]
    assert crash_site(lines) == ("string_at (/usr/lib/python3.11/ctypes/__init__.py:519)", True)


def test_a_forged_frame_shows_printable_text_only_and_a_bounded_path():
    forged = [
        "Current thread 0x0000000000000001 (most recent call first):",
        '  File "/tmp/' + "a" * 5000 + '\x1b[2J\u202e.py", line 7 in f',
    ]
    assert crash_site(forged) is None  # a path past 1000 characters is no frame of a dump
    forged[1] = '  File "/tmp/' + "a" * 900 + '\x1b[2J\u202eevil.py", line 7 in f'
    frame, own = crash_site(forged)
    assert own and frame.startswith("f (...") and frame.endswith("aaa[2Jevil.py:7)")
    assert len(frame) < 150 and all(c.isprintable() for c in frame)
    # A function name that is no identifier is no frame.
    assert crash_site([forged[0], '  File "/x.py", line 7 in f; rm -rf /']) is None


def test_stacks_too_long_for_the_kept_tail_are_read_from_the_longer_one():
    # 3 threads of 100 frames: the crashing thread's innermost frame is near the top.
    deep = [f'  File "/lib/m{i}.py", line {i} in f{i}' for i in range(100)]
    dump = [
        "Fatal Python error: Segmentation fault",
        "",
        "Current thread 0x0000000000000002 (most recent call first):",
        '  File "/lib/inner.py", line 5 in crashed_here',
        *deep,
        "",
        "Thread 0x0000000000000001 (most recent call first):",
        *deep,
    ]
    assert crash_site(dump) == ("crashed_here (/lib/inner.py:5)", True)
    assert crash_site(dump[-50:]) is None  # the 50 lines a job keeps hold no header
