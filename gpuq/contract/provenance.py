"""Where a job's code came from, as the client that submitted it saw it (`gpuq run` fills it
in from git and the project's folder): shown with the job, compared by `gpuq diff`, carried
over by `gpuq rerun`. The client's word, not gpuq's: a job's owner may write anything here,
and it is shown as theirs."""

from pydantic import Field

from gpuq.contract.spec_fields import SHA256, StrictModel

#: printable text: no control characters (a terminal escape in a branch name would be
#: printed as is by `gpuq show` to whoever looks at the job)
PRINTABLE = r"^[^\x00-\x1f\x7f-\x9f]*$"


class Provenance(StrictModel):
    folder: str | None = Field(
        None,
        max_length=4096,
        pattern=PRINTABLE,
        description="The folder it was submitted from, on that host.",
    )
    git_commit: str | None = Field(
        None, pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$", description="git's HEAD commit."
    )
    git_branch: str | None = Field(
        None,
        max_length=256,
        pattern=PRINTABLE,
        description="The branch checked out; null when detached.",
    )
    git_dirty: bool | None = Field(
        None, description="Whether the work tree differed from HEAD (edits or new files)."
    )
    git_diff_sha256: str | None = Field(
        None, pattern=SHA256, description="The sha256 of `git diff HEAD --binary`; null: clean."
    )
    python: str | None = Field(
        None,
        max_length=512,
        pattern=PRINTABLE,
        description="The interpreter that submitted it, and its version.",
    )
    lockfile: str | None = Field(
        None,
        max_length=4096,
        pattern=PRINTABLE,
        description="The lock or requirements file found beside the code (its path in the "
        "snapshot), e.g. `uv.lock`, `requirements.txt`.",
    )
    lockfile_sha256: str | None = Field(None, pattern=SHA256, description="Its sha256.")
