"""What can stop a snapshot, each with a message written for the person at the terminal."""


class SnapshotError(Exception):
    """A snapshot could not be made; the message says why and what to do."""


class SnapshotTooLarge(SnapshotError):
    """The project holds more than the snapshot size limit allows (`check_size`)."""

    def __init__(self, message: str, *, total: int, largest: tuple[tuple[str, int], ...]):
        super().__init__(message)
        self.total = total  #: bytes the snapshot would hold
        self.largest = largest  #: (name, bytes) of the largest files, largest first


class SnapshotChanged(SnapshotError):
    """A file changed, appeared or disappeared while the tar was being written: what was
    written so far is incomplete and must be thrown away."""

    def __init__(self, name: str, why: str):
        super().__init__(
            f"{name} {why} while the snapshot was being made: run again (or, if something "
            "keeps writing it, add it to .gpuqignore)"
        )
        self.name = name
