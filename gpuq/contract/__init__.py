"""The run contract: everything the service and the worker agree on, and nothing else.

The job spec (`spec`, built from `spec_fields`, `keras_spec` and `command_spec`), the
run directory and its files (`rundir`), what the service hands
a worker (`runspec`, `device_plan`), the events a worker writes (`events`) and what the
service accepts of them (`event_records`), of its runner's `exit.json` and `runner.json`
(`run_records`), exit codes and how an exit is judged (`exits`,
`outcome`), job states and reasons (`states`), and the process helpers both sides use
(`processes`). It imports neither `service` nor
`worker` (`make lint` checks), and its stdlib-only modules (`rundir`, `events`,
`exits`, `device_plan`, `processes`) keep the runner's start fast.
"""
