"""Where a crashed Python program was: the innermost frame of the stacks `faulthandler` left
at the end of its log.

Every job gpuq starts with Python has `faulthandler` on (`PYTHONFAULTHANDLER`, set by
`runspec.device_environment`), so a SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT writes the
stack of each Python thread to `output.log` before the process dies:

    Fatal Python error: Segmentation fault

    Thread 0x00007f4535ff86c0 (most recent call first):
      File ".../threading.py", line 331 in wait
      ...
    Current thread 0x00007f458e438b80 (most recent call first):
      File ".../epoch_iterator.py", line 99 in reset
      ...

The crashing thread is the "Current thread"; a crash in a thread Python never knew (a
library's own) names none, and then the main thread (listed last) says where Python was.
The log is the job's: only lines of exactly this shape are read, and only their printable
characters are kept.
"""

import re
import signal
from collections.abc import Sequence

#: the signals a program dies of when it crashes, rather than when it is killed
CRASH_SIGNALS = frozenset(
    int(s) for s in (signal.SIGILL, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGSEGV)
)

#: a node's prefix on a log line of a job on several nodes (`[node-1] `)
_NODE = r"(?:\[[\w.-]{1,100}\] )?"
_FATAL = re.compile(_NODE + r"Fatal Python error: ")
_THREAD = re.compile(
    _NODE + r"(Current thread|Thread) 0x[0-9a-f]{1,16} \(most recent call first\):$"
)
_FRAME = re.compile(_NODE + r'  File "([^"]{1,1000})", line (\d{1,9}) in ([\w<>.]{1,200})$')
_SHOWN_PATH = 120  #: characters of a frame's file shown, its end kept


def crash_site(log_tail: Sequence[str]) -> tuple[str, bool] | None:
    """The innermost frame of the last stacks dumped in `log_tail` (`reset
    (keras/src/trainers/epoch_iterator.py:99)`), and whether it is the crashing thread's
    own (False: the main thread's, the crash having come from a thread outside Python);
    None without a dump."""
    lines = [line.rstrip("\r\n") for line in log_tail]
    fatal = [i for i, line in enumerate(lines) if _FATAL.match(line)]
    innermost: list[tuple[str, bool]] = []  #: each thread's, in the order dumped
    current: bool | None = None  #: after a thread's header: whether it is the crashing one
    for line in lines[fatal[-1] if fatal else 0 :]:
        if header := _THREAD.match(line):
            current = header.group(1) == "Current thread"
            continue
        if current is not None and (frame := _FRAME.match(line)):
            innermost.append((_shown(*frame.groups()), current))
        current = None
    crashing = [frame for frame in innermost if frame[1]]
    shown = crashing or innermost
    return shown[-1] if shown else None


def _shown(path: str, line: str, function: str) -> str:
    # Past site-packages is what names the library; a long path keeps its end.
    path = path.rpartition("site-packages/")[2] or path
    path = "".join(c for c in path if c.isprintable())
    if len(path) > _SHOWN_PATH:
        path = "..." + path[-_SHOWN_PATH:]
    return f"{function} ({path}:{line})"
