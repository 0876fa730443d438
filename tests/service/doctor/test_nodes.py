"""How `gpuq doctor --nodes` judges what the probe said on each node (the probe itself runs
on the real test cluster in tests/slurm/test_doctor_nodes.py)."""

from typing import Any

from service.doctor.node_probe import package_version
from service.doctor.nodes import checks_from_probe

HERE = package_version("gpuq")


def said(rank: int, node: str, **fields: Any) -> dict[str, Any]:
    return {
        "rank": rank,
        "node": node,
        "python": "/opt/gpuq/bin/python",
        "python_version": "3.11.7",
        "gpuq": HERE,
        "frameworks": {"tensorflow": True, "torch": False},
        "reached": {"n2" if rank == 0 else "n1": "ok"},
        **fields,
    }


def statuses(*records: dict[str, Any], seen: dict[int, Any] | None = None) -> dict[str, Any]:
    found = checks_from_probe(
        list(records),
        seen if seen is not None else {r["rank"]: r for r in records},
        nodes=2,
        python="/opt/gpuq/bin/python",
        srun_failure=None,
        where="partition multi",
    )
    return {c.name: (c.status.value, c.detail, c.hint) for c in found}


def test_two_good_nodes_pass_and_are_listed_in_rank_order():
    found = statuses(said(1, "n2"), said(0, "n1"))
    assert {name: s for name, (s, _, _) in found.items()} == {
        "compute nodes": "pass",
        "interpreter": "pass",
        "TensorFlow": "pass",
        "shared GPUQ_HOME": "pass",
        "ports between nodes": "pass",
    }
    assert found["compute nodes"][1] == "srun ran the probe on 2 node(s) of partition multi: n1, n2"
    assert (
        found["interpreter"][1]
        == f"gpuq {HERE} on every node: /opt/gpuq/bin/python (Python 3.11.7)"
    )


def test_a_node_that_could_not_meet_the_others_fails_the_shared_home():
    lost = said(1, "n2", error="node ranks [0] did not announce themselves", reached={})
    status, detail, hint = statuses(said(0, "n1", reached={}), lost)["shared GPUQ_HOME"]
    assert status == "fail" and detail == "n2 (node ranks [0] did not announce themselves)"
    assert "same path" in hint


def test_a_folder_this_host_does_not_see_fails_the_shared_home():
    first, second = said(0, "n1"), said(1, "n2")
    status, detail, hint = statuses(first, second, seen={0: first, 1: None})["shared GPUQ_HOME"]
    assert status == "fail" and "this host does not see what n2 wrote" in detail
    assert hint.endswith("this host included")


def test_a_refused_connection_is_named_with_both_nodes():
    refused = said(1, "n2", reached={"n1": "10.0.0.1:40001: Connection refused"})
    status, detail, hint = statuses(said(0, "n1"), refused)["ports between nodes"]
    assert status == "fail" and detail == "n2 → n1: 10.0.0.1:40001: Connection refused"
    assert "NodeAddr" in hint


def test_another_gpuq_or_no_tensorflow_on_a_node():
    old = said(1, "n2", gpuq="0.0.1", frameworks={"tensorflow": False})
    found = statuses(said(0, "n1"), old)
    assert found["interpreter"][:2] == ("fail", f"gpuq {HERE} here, but 0.0.1 on n2")
    assert found["TensorFlow"][:2] == ("fail", "not installed for gpuq's interpreter on n2")


def test_a_node_missing_from_srun_s_output():
    found = statuses(said(0, "n1", reached={}))
    assert found["compute nodes"][:2] == ("fail", "1 of 2 nodes reported: n1")
    assert found["ports between nodes"][:2] == ("fail", "no node got as far as connecting")


def test_srun_that_ran_nothing_is_one_check_with_its_words():
    found = checks_from_probe(
        [],
        {},
        nodes=2,
        python="/x/python",
        srun_failure="srun exited 2: execve(): /x/python: No such file or directory",
        where="partition multi",
    )
    assert [(c.name, c.status.value) for c in found] == [("compute nodes", "fail")]
    assert "GPUQ_SLURM_PYTHON" in found[0].hint
