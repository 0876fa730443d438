from worker import oom


def test_the_oom_kill_counter_is_read_from_the_memory_cgroup(tmp_path, monkeypatch):
    (tmp_path / "memory" / "jobs").mkdir(parents=True)
    (tmp_path / "memory" / "jobs" / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
    )
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "memory.events").write_text("low 0\nhigh 0\nmax 2\noom 2\noom_kill 5\n")
    monkeypatch.setattr(oom, "CGROUP_ROOT", tmp_path)
    cgroup = tmp_path / "cgroup"
    cgroup.write_text("4:memory:/jobs\n")
    assert oom.oom_kills(cgroup) == 3
    cgroup.write_text("0::/v2\n")
    assert oom.oom_kills(cgroup) == 5
    cgroup.write_text("1:cpu:/\n")
    assert oom.oom_kills(cgroup) is None
