"""A sweep spec's members: every point once, put into each member's own spec, or a 422
naming the field."""

import pytest

from gpuq.contract.sweep import SweepSpec, env_name
from service.errors import Invalid
from service.sweeps.expand import expand, member_count
from tests.conftest import command_spec, job_spec


def sweep(section, base=None) -> SweepSpec:
    return SweepSpec.model_validate({**(base or job_spec()), "sweep": section})


def test_a_grid_makes_every_combination_each_in_its_own_spec():
    spec = sweep(
        {"parameters": {"keras.learning_rate": [0.1, 0.01], "keras.batch_size": [32, 64, 128]}}
    )
    members = expand(spec, limit=100, seed=0).members
    assert member_count(spec.sweep) == len(members) == 6
    pairs = [(m.spec.keras.learning_rate, m.spec.keras.batch_size) for m in members]
    assert pairs == [(a, b) for a in (0.1, 0.01) for b in (32, 64, 128)]
    assert [m.spec.name for m in members] == [f"tiny-{i}" for i in range(1, 7)]
    assert members[0].params == {"keras.learning_rate": 0.1, "keras.batch_size": 32}


def test_a_nested_field_and_a_list_of_points():
    spec = sweep(
        {"search": "list", "points": [{"keras.model.hidden_units": [64, 32]}, {"keras.seed": 7}]}
    )
    first, second = expand(spec, limit=10, seed=0).members
    assert first.spec.keras.model.hidden_units == [64, 32]
    assert second.spec.keras.seed == 7 and second.spec.keras.model.hidden_units == [16]


def test_a_random_search_is_repeatable_with_its_seed_and_stays_in_its_ranges():
    section = {
        "search": "random",
        "samples": 50,
        "parameters": {
            "keras.learning_rate": {"low": 1e-5, "high": 1e-1, "scale": "log"},
            "keras.batch_size": {"low": 16, "high": 256, "integer": True},
            "keras.optimizer": ["adam", "sgd"],
        },
    }
    drawn = expand(sweep(section), limit=100, seed=123)
    again = expand(sweep(section), limit=100, seed=123)
    other = expand(sweep(section), limit=100, seed=124)
    assert drawn.seed == 123
    assert [m.params for m in drawn.members] == [m.params for m in again.members]
    assert [m.params for m in drawn.members] != [m.params for m in other.members]
    rates = [m.params["keras.learning_rate"] for m in drawn.members]
    assert all(1e-5 <= r <= 1e-1 for r in rates)
    # Log-uniform: about as many below 1e-3 (two decades of four) as above.
    below = sum(r < 1e-3 for r in rates)
    assert 12 <= below <= 38
    sizes = [m.params["keras.batch_size"] for m in drawn.members]
    assert all(isinstance(s, int) and 16 <= s <= 256 for s in sizes)
    assert {m.params["keras.optimizer"] for m in drawn.members} == {"adam", "sgd"}
    # A seed given in the spec wins over the one gpuq would draw.
    fixed = {**section, "seed": 5}
    assert (
        expand(sweep(fixed), limit=100, seed=1).members
        == expand(sweep(fixed), limit=100, seed=2).members
    )


def test_a_command_job_gets_its_parameters_in_argv_and_the_environment_by_name():
    base = command_spec("pass")
    base["command"]["argv"] += ["--lr", "{lr}", "--tag={act}-{bs}", "{other}"]
    spec = sweep({"parameters": {"lr": [1e-3], "bs": [32], "act": ["relu"]}}, base)
    expansion = expand(spec, limit=10, seed=0)
    (member,) = expansion.members
    assert member.spec.command.argv[-4:] == ["--lr", "0.001", "--tag=relu-32", "{other}"]
    assert expansion.warnings == [
        "argv has {other}, which is no parameter of this sweep: left as it is"
    ]
    assert env_name("lr") == "GPUQ_PARAM_LR"
    assert env_name("keras.learning_rate") == "GPUQ_PARAM_KERAS_LEARNING_RATE"


@pytest.mark.parametrize(
    ("section", "loc", "words"),
    [
        ({"parameters": {"keras.lr": [1]}}, ("keras.lr",), "'lr' is not a field of keras"),
        ({"parameters": {"command.argv": [["x"]]}}, ("command.argv",), "no section 'command'"),
        ({"parameters": {"keras.learning_rate": [0.1, -1]}}, ("keras.learning_rate",), "member 2"),
        ({"parameters": {"lr": [1]}}, ("lr",), "by their path"),
        ({"parameters": {"keras.seed": list(range(11))}}, (), "would make 11 jobs"),
    ],
)
def test_a_member_that_cannot_be_made_is_a_422_at_its_parameter(section, loc, words):
    with pytest.raises(Invalid, match=words) as caught:
        expand(sweep(section), limit=10, seed=0)
    assert caught.value.loc == ("body", "sweep", *(("parameters", *loc) if loc else ()))


def test_a_grid_is_counted_before_it_is_made():
    huge = {f"keras.{n}": list(range(100)) for n in ("seed", "batch_size", "epochs")}
    spec = sweep({"parameters": huge})
    assert member_count(spec.sweep) == 10**6
    with pytest.raises(Invalid, match="1000000 jobs; this gpuq allows at most 500"):
        expand(spec, limit=500, seed=0)


def test_a_metric_no_builtin_member_reports_is_a_warning_not_a_refusal():
    spec = sweep({"parameters": {"keras.seed": [1, 2]}, "metric": "val_loss"})
    (warning,) = expand(spec, limit=10, seed=0).warnings
    assert "no member reports the metric 'val_loss' (they report loss, mae)" in warning
    split = job_spec(keras={"validation_split": 0.2})
    assert (
        expand(
            sweep({"parameters": {"keras.seed": [1]}, "metric": "val_mae"}, split), limit=10, seed=0
        ).warnings
        == []
    )


def test_the_section_itself_says_what_does_not_fit_together():
    bad = [
        ({"parameters": {}}, "needs `parameters`"),
        ({"search": "list", "points": []}, "needs `points`"),
        ({"parameters": {"keras.seed": {"low": 1, "high": 2}}}, "range is drawn from"),
        ({"search": "random", "parameters": {"keras.seed": [1]}}, "`samples` goes with"),
        ({"parameters": {"keras.seed": [1]}, "early_stopping": {}}, "needs a `metric`"),
        (
            {
                "search": "random",
                "samples": 2,
                "parameters": {"keras.learning_rate": {"low": 2, "high": 1}},
            },
            "low \\(2\\) is above high",
        ),
        (
            {
                "search": "random",
                "samples": 2,
                "parameters": {"keras.learning_rate": {"low": 0, "high": 1, "scale": "log"}},
            },
            "above 0",
        ),
    ]
    for section, words in bad:
        with pytest.raises(ValueError, match=words):
            sweep(section)
