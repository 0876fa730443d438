"""A job's artifacts (the files its attempt left) as the API lists them."""

from datetime import datetime

from pydantic import BaseModel

from service.usage.public import described


class ArtifactPublic(BaseModel):
    name: str = described("Path under the job's folders: `model.keras`, `checkpoints/...`, ...")
    size_bytes: int = described("Size in bytes.")
    modified_at: datetime = described("Last written (UTC).")


class ArtifactList(BaseModel):
    job_id: int = described("The job.")
    attempt: int = described("The attempt these files belong to (0: never launched, no files).")
    artifacts: list[ArtifactPublic] = described(
        "Files by name; download one at `.../artifacts/{name}`."
    )
