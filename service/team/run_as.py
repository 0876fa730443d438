"""Whose Unix account a job runs as, and what that allows it to name (GPUQ_RUN_AS).

- `owner`: gpuq runs as root; each job runs as the account bound to its owner
  (`gpuq users add NAME --unix-user LOGIN`), and a job whose owner has none is refused.
- `service`: every job runs as gpuq's own account. Under root that would be root, so
  `command` jobs are refused unless GPUQ_ALLOW_ROOT_JOBS=1 (a single-user box, a container).

The rules are asked at submit (`runtime.checks.SubmitChecks`) and again as each attempt starts
(`launch_as`), with the settings and users of that moment: a job may wait for days.
"""

import logging
from dataclasses import replace

from gpuq.contract.account import Account
from gpuq.contract.spec import JobSpec
from service.errors import Forbidden
from service.executors.base import Launch, LaunchError
from service.settings import Settings
from service.store.db import Database
from service.team import accounts, users
from service.team.data_access import PathRules
from service.team.users import Caller

log = logging.getLogger(__name__)

BIND_HINT = (
    "an admin binds members to their Unix accounts (`gpuq users set NAME --unix-user LOGIN`) "
    "and sets GPUQ_RUN_AS=owner"
)


class RunAsError(Exception):
    """The settings ask for what this process cannot do (GPUQ_RUN_AS=owner, not as root)."""


def check_startup(settings: Settings) -> None:
    """Raises `RunAsError` if jobs cannot run as the settings say; logs who they run as."""
    root = accounts.running_as_root()
    if settings.run_as == "owner":
        if not root:
            raise RunAsError(
                f"GPUQ_RUN_AS=owner needs gpuq to run as root, to start each job as its "
                f"owner's Unix account; it runs as {accounts.service_account()}. Start it as "
                "root, or use GPUQ_RUN_AS=service (every job as gpuq's own account)"
            )
        log.info("jobs run as their owners' Unix accounts (GPUQ_RUN_AS=owner)")
    elif root and settings.allow_root_jobs:
        log.warning(
            "JOBS RUN AS ROOT: GPUQ_RUN_AS=service under root with GPUQ_ALLOW_ROOT_JOBS=1; "
            "any member's command job can do anything on this machine. Meant for a "
            "single-user box or a container; otherwise %s",
            BIND_HINT,
        )
    elif root:
        log.warning(
            "gpuq runs as root with GPUQ_RUN_AS=service: command jobs are refused, since they "
            "would run as root; %s (or set GPUQ_ALLOW_ROOT_JOBS=1 on a single-user box)",
            BIND_HINT,
        )
    else:
        log.info(
            "jobs run as gpuq's own account, %s (GPUQ_RUN_AS=service)", accounts.service_account()
        )


SHARED_HINT = (
    "set GPUQ_RUN_AS=owner (each job as its owner's Unix account; gpuq runs as root), or, "
    "for one person with several tokens, GPUQ_ALLOW_SHARED_ACCOUNT=1"
)


def shares_account(settings: Settings) -> bool:
    """Whether members' own programs run as gpuq's account: GPUQ_RUN_AS=service, and
    command jobs allowed (not root, or root with GPUQ_ALLOW_ROOT_JOBS=1)."""
    return settings.run_as == "service" and (
        not accounts.running_as_root() or settings.allow_root_jobs
    )


def sharing_members(settings: Settings, db: Database, owner: str | None = None) -> int:
    """How many people's jobs run as gpuq's own account (`shares_account`): the users, and
    the owner of a job about to start where it is none of them (a job queued before users
    were added, or of a revoked user); 0 where none do, or in open mode."""
    if not shares_account(settings):
        return 0
    names = {user.caller.name for user in users.current_users(db)}
    if names and owner is not None:
        names.add(owner)
    return len(names)


def shared_account_problem(settings: Settings, members: int) -> str | None:
    """Why `members` users (`sharing_members`) cannot share gpuq's account, or None where
    they may (one user, or none; or an admin's GPUQ_ALLOW_SHARED_ACCOUNT=1)."""
    if members <= 1 or settings.allow_shared_account:
        return None
    return (
        f"{members} users share gpuq's own account ({accounts.service_account()}, "
        "GPUQ_RUN_AS=service): each one's jobs could read and change gpuq's database and "
        f"every other member's jobs and files; {SHARED_HINT}"
    )


def check_members(settings: Settings, db: Database) -> None:
    """At start-up: raises `RunAsError` where several users would share gpuq's account;
    warns where an admin lets them."""
    members = sharing_members(settings, db)
    problem = shared_account_problem(settings, members)
    if problem is not None:
        raise RunAsError(problem)
    if members > 1:
        log.warning(
            "members' jobs share gpuq's own account (GPUQ_ALLOW_SHARED_ACCOUNT=1): each can "
            "act as gpuq and as every other member"
        )


def account_for(settings: Settings, caller: Caller) -> Account | None:
    """The account `caller`'s jobs run as: None for gpuq's own (GPUQ_RUN_AS=service);
    `Forbidden` when it must be the owner's and they have none here."""
    if settings.run_as != "owner":
        return None
    if caller.unix_user is None:
        raise Forbidden(
            f"jobs run as their owner's Unix account here (GPUQ_RUN_AS=owner), and "
            f"{caller.name} is bound to none: an admin runs `gpuq users set {caller.name} "
            "--unix-user LOGIN`, or submit over the local socket as yourself"
        )
    account, problem = job_account(caller.unix_user)
    if account is None:
        raise Forbidden(
            f"{caller.name} cannot run jobs: {problem}; an admin binds another account with "
            f"`gpuq users set {caller.name} --unix-user LOGIN`"
        )
    return account


def job_account(login: str) -> tuple[Account | None, str]:
    """The account `login`, fit to run jobs (it exists and is not root); else None and
    why not. Asked at submit, and again when the job starts."""
    account = accounts.lookup(login)
    if account is None:
        return None, f"the Unix account {login!r} does not exist on this box"
    if account.uid == 0:
        return None, f"{login!r} is a root account"
    return account, ""


def check_shared(settings: Settings, db: Database) -> None:
    """At submission: refuses jobs while several users would share gpuq's account (a user
    added since gpuq started)."""
    problem = shared_account_problem(settings, sharing_members(settings, db))
    if problem is not None:
        raise Forbidden(f"no job can run here: {problem}")


def root_problem(settings: Settings, spec: JobSpec) -> str | None:
    """Why `spec` would run someone's own program as root by accident; None where it would
    not."""
    if (
        spec.command is not None
        and settings.run_as == "service"
        and accounts.running_as_root()
        and not settings.allow_root_jobs
    ):
        return (
            "command jobs and sessions would run as root here (gpuq runs as root with "
            "GPUQ_RUN_AS=service); "
            f"{BIND_HINT}, or on a single-user box set GPUQ_ALLOW_ROOT_JOBS=1"
        )
    return None


def check_spec(settings: Settings, spec: JobSpec) -> None:
    """Refuses a job that would run someone's own program as root by accident."""
    problem = root_problem(settings, spec)
    if problem is not None:
        raise Forbidden(problem)


def path_rules(settings: Settings, account: Account | None, *, has_users: bool) -> PathRules:
    """Which paths a job may name: as its owner, under GPUQ_DATA_DIRS, or (open mode) any."""
    if account is not None:
        return PathRules(account=account)
    if has_users:
        # Other members' run directories, whatever GPUQ_DATA_DIRS says.
        return PathRules(roots=tuple(settings.data_roots), closed=(settings.runs_dir.resolve(),))
    return PathRules()


class LaunchRefused(LaunchError):
    """A placed job may not start: the rules in force now refuse it, or its owner's account
    is gone."""


#: what every refusal at the start of a job ends with
RESUBMIT = "then submit it again"


def launch_as(
    settings: Settings, db: Database, launch: Launch, owner: str, unix_user: str | None
) -> Launch:
    """`launch`, if the rules in force now let `owner`'s job start (those it was admitted
    under, with today's settings, users and bindings: a job may wait for days), with whom
    it runs as (GPUQ_RUN_AS=owner) or where its data must lie (users, jobs as gpuq's
    account); `LaunchRefused` saying which rule refused it."""
    problem = root_problem(settings, launch.spec) or _shared_problem(settings, db, owner)
    if problem is not None:
        raise LaunchRefused(f"not started: {problem}; {RESUBMIT}")
    if settings.run_as == "owner":
        return replace(launch, run_as=_owner_account(db, owner, unix_user))
    if users.has_users(db):
        return replace(launch, data_roots=tuple(str(r) for r in settings.data_roots))
    return launch


def _shared_problem(settings: Settings, db: Database, owner: str) -> str | None:
    """`shared_account_problem` at the start of `owner`'s job, where `owner` may be no user
    now: one who submitted it before users were added, or a revoked one."""
    problem = shared_account_problem(settings, sharing_members(settings, db, owner))
    if problem is None or any(u.caller.name == owner for u in users.current_users(db)):
        return problem
    return (
        f"its owner {owner} is no gpuq user now (it was queued before users were added, or "
        f"{owner} was revoked), and its program would run as gpuq's own account "
        f"({accounts.service_account()}, GPUQ_RUN_AS=service) beside the users' jobs, able to "
        f"read and change gpuq's database and their jobs and files; {SHARED_HINT}"
    )


def _owner_account(db: Database, owner: str, unix_user: str | None) -> Account:
    """The account `owner`'s job runs as: the one it was submitted with, still fit to run
    jobs, and still `owner`'s where they are a user (an admin may have bound them elsewhere
    since)."""
    bound = next((u.caller for u in users.current_users(db) if u.caller.name == owner), None)
    if bound is not None and bound.unix_user != unix_user:
        was = f"the Unix account {unix_user!r}" if unix_user else "no Unix account"
        if bound.unix_user is None:
            now = f"to none now; an admin binds them (`gpuq users set {owner} --unix-user LOGIN`)"
        else:
            now = f"to {bound.unix_user!r} now"
        raise LaunchRefused(
            f"not started: jobs run as their owner's Unix account (GPUQ_RUN_AS=owner), and "
            f"{owner} was bound to {was} when it was queued but {now}; {RESUBMIT}"
        )
    if unix_user is None:
        account, problem = None, "its owner was bound to no Unix account at submit"
    else:
        account, problem = job_account(unix_user)
    if account is None:
        raise LaunchRefused(
            f"not started: cannot run as its owner (GPUQ_RUN_AS=owner): {problem}; an admin "
            f"binds {owner} to an account (`gpuq users set {owner} --unix-user LOGIN`); "
            f"{RESUBMIT}"
        )
    return account
