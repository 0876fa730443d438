"""What runs a gpuq job: the launcher, runners, warm workers, gpuq's own trainer and the
start-up hook of `command` jobs. It imports `gpuq`, never `service`: docs/ARCHITECTURE.md."""
