"""Unix accounts on this box: who a job runs as under GPUQ_RUN_AS=owner."""

import os
import pwd

from gpuq.contract.account import Account


def lookup(login: str) -> Account | None:
    """The account named `login`, with all its groups; None if there is no such account."""
    try:
        entry = pwd.getpwnam(login)
    except KeyError:
        return None
    groups = {entry.pw_gid, *os.getgrouplist(login, entry.pw_gid)}
    return Account(login, entry.pw_uid, entry.pw_gid, tuple(sorted(groups)), entry.pw_dir)


def running_as_root() -> bool:
    return os.geteuid() == 0


def service_account() -> str:
    """The name of the account gpuq itself runs as."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"
