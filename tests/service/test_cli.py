from service.cli.main import load_spec


def test_yaml_specs_read_exponents_as_numbers(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("keras:\n  learning_rate: 1e-3\n  epochs: 2\nname: x\ntime_limit_s: 1.5E+2\n")
    assert load_spec(str(path)) == {
        "keras": {"learning_rate": 0.001, "epochs": 2},
        "name": "x",
        "time_limit_s": 150.0,
    }


def test_json_specs_are_read_as_json(tmp_path):
    path = tmp_path / "job.json"
    path.write_text('{"name": "y", "priority": 1}')
    assert load_spec(str(path)) == {"name": "y", "priority": 1}
