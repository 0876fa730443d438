"""The Unix account a job runs as (GPUQ_RUN_AS=owner): what the launcher needs to become
it before anything of the job runs."""

import os
from dataclasses import asdict, dataclass
from typing import Any

#: the mode of a job's run directories and files: its owner's alone
UMASK = 0o077


@dataclass(frozen=True)
class Account:
    login: str
    uid: int
    gid: int  #: primary group
    groups: tuple[int, ...]  #: every group, the primary one included
    home: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Account":
        return cls(
            login=str(data["login"]),
            uid=int(data["uid"]),
            gid=int(data["gid"]),
            groups=tuple(int(g) for g in data["groups"]),
            home=str(data["home"]),
        )

    def environment(self) -> dict[str, str]:
        """The variables that say who the process is."""
        return {"HOME": self.home, "USER": self.login, "LOGNAME": self.login}

    def become(self) -> None:
        """Drops this process to the account for good: groups first, then the group, then
        the user (after which nothing can be taken back), and the owner-only umask."""
        os.setgroups(list(self.groups))
        os.setresgid(self.gid, self.gid, self.gid)
        os.setresuid(self.uid, self.uid, self.uid)
        os.umask(UMASK)
