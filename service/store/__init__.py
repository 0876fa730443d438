"""Where the state lives: the engine (SQLite or PostgreSQL), the tables, the migrations'
runner, pagination, and the notices that wake waiting requests when a write commits.

`store.db.Database` is a read engine and a write engine on one database, SQLite by default
or PostgreSQL (`GPUQ_DATABASE_URL=postgresql+psycopg://...`), and either way one writer at a
time: SQLite's `BEGIN IMMEDIATE`, or on PostgreSQL (`store.postgres`) a transaction-level
advisory lock that every write transaction takes first, across processes and hosts. On
SQLite gpuq's processes also take turns on a lock file beside it (`store.write_turns`,
`gpuq.db-write.lock`) before `BEGIN IMMEDIATE`: a writer waits just as long as the write
before it, where SQLite's busy handler would sleep 1, 2, 5, 10... ms between tries. So a
job's revision (kept by triggers, migration 0005; on SQLite gpuq's insert gives it itself
and the trigger sets it only where a write gave none above the rest, migration 0016) follows
commit order, and a quota or an idempotency key is checked and used in one step. A migration
takes that turn too, and waits for it however long another's migration takes
(`Database.migrating`): Alembic reads the schema's revision before it writes, which SQLite
refuses at once ("database is locked") while another connection writes, so processes that
start together on a new or older database migrate one after the other, as the advisory lock
makes them do on PostgreSQL. Reads see one snapshot each (WAL; `REPEATABLE READ`). Dialect-
specific SQL stays in `store` (`store.upsert` for upserts) and the migrations.

`Database.write` tells `store.commit_notices.CommitNotices` after each commit, which wakes
long polls and event streams (`jobs.changes`). On PostgreSQL every write transaction also
sends `NOTIFY gpuq_changes`; each process's `store.change_listener` thread LISTENs on a
connection of its own and passes other processes' commits to the same notices, so an API-
only process answers at once; an API-only process signs its notices `api-only:...`, and
those also wake the scheduler (`Database.wake_on_api_commits`). On SQLite gpuq serve's API
hears its scheduler's process over their socket pair. An `--api-only` process
(`Database.open(url, api_only=True)`) watches the write-ahead log instead
(`store.foreign_commits`, inotify through `inotify_simple`: on a change it takes a write
turn, so the writer has committed, and asks `PRAGMA data_version`; its own writes look once
committed, so what it finds is another process's), and after each of its commits touches
`gpuq.db-wake` (`store.wake_file`), a file the scheduler's process watches by itself, so
that gpuq serve's own commits never wake that watch (`store.file_watch`). `Database.cached`
keeps a value until anything commits, in any process (SQLite's `PRAGMA data_version`,
PostgreSQL's current snapshot), or, given a `revision`, until that row of the `revision`
table changes: triggers raise `users` on every change to the user table (migration 0015), so
the active users that every request and every start need are read again only when a user
changed, not after every commit. The scheduler's `queued.QueueReader` does the same for the
queue with each job's `rev`, which follows commit order: every planning step asks for the
jobs whose revision is above the highest it has read (through the revision's index) and
reads again the rows of those still queued; every 10 s it compares every queued job's
revision instead. What a plan itself wrote (wait reasons and queue positions,
`QueueReader.wrote`: the revisions of its own transaction, which no other writer shares) is
taken as written, not read back; it writes only rows no one changed since its read
(`set_wait_reasons(unchanged_since=)`), so a hold or a release that came in meanwhile is
read, not hidden behind the plan's write. Fair share's usage of the GPU jobs that ended
within its horizon (20 half-lives: five days at the default) is kept the same way
(`ended_usage.EndedUsage`): each ended job's weight, relative to a reference moment, is
worked out once and summed per owner, and a plan reads only the jobs that ended since the
last one (the index on status and revision); at 100,000 such jobs a step costs what it does
with none, where reading them all took a second. A plan asks more than room only of the jobs
that are not `plain` (held, backing off, not before a time, depending on another, in a
sweep), and orders the queue on one int a job, made once per job where usage orders no one
(`placement.order`). Positions that only moved are rewritten at most every 2 s
(`place.POSITIONS_EVERY_S`); a plan that leaves some behind plans again when that period
ends (`Replan.plan_by`), whatever else happens: the loop, idle or not, wakes for it.
"""
