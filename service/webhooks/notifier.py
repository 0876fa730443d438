"""The notifier: a thread of the scheduling process that, every `POLL_S` or when woken,

    queue → send

`queue` turns jobs' state changes into pending deliveries (`queue.queue_changes`); `send`
hands due deliveries to a few sender threads (`delivery.post`). A receiver that hangs
holds one sender until `webhook_timeout_s`, never this loop, and never the scheduler,
which only writes job rows. Everything it has to do is in the database, so deliveries
left pending by a stop or a crash go out once the service runs again.
"""

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx

from service.addresses import AllowList
from service.background import Background, logged
from service.jobs.reads import highest_revision
from service.settings import Settings
from service.store.db import Database
from service.store.tables import WebhookDelivery
from service.webhooks import delivery, transport
from service.webhooks.queue import has_changes, queue_changes

log = logging.getLogger(__name__)

#: How often it looks for changes and due deliveries when nothing wakes it.
POLL_S = 0.5
#: Deliveries in flight at once: as many receivers may hang before the rest wait.
SENDERS = 4


class Notifier:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self._loop = Background("gpuq-notifier", self._step)
        self._senders: ThreadPoolExecutor | None = None
        self._http: httpx.Client | None = None
        self._in_flight: set[int] = set()
        self._lock = threading.Lock()
        self._since = 0  #: job revisions up to this one are notified

    def start(self) -> None:
        allow = AllowList.parse(self.settings.webhook_allow)
        self._http = transport.client(allow, self.settings.webhook_timeout_s)
        self._senders = ThreadPoolExecutor(SENDERS, thread_name_prefix="gpuq-webhook")
        self._loop.start()

    def stop(self) -> None:
        """Stops looking; waits for deliveries in flight (each at most its timeout)."""
        self._loop.stop()
        if self._senders is not None:
            self._senders.shutdown(wait=True, cancel_futures=True)
        if self._http is not None:
            self._http.close()

    def wake(self) -> None:
        self._loop.wake()

    def _step(self) -> float:
        if logged(self.queue, log, "webhook notifier step"):
            logged(self.send, log, "webhook notifier step")
        return POLL_S

    # --- the steps ---------------------------------------------------------------------------

    def queue(self) -> None:
        """Queues a delivery for each job whose state changed since it was last notified."""
        more = True
        while more and not self._loop.stopping.is_set():
            with self.db.read() as session:
                if not has_changes(session, self._since):
                    # Nothing up to the newest revision needs a delivery: look past it next
                    # time, so a quiet tick costs one short index read however many jobs.
                    self._since = highest_revision(session.connection())
                    return
            with self.db.write() as session:
                self._since, more = queue_changes(session, self._since)

    def send(self) -> None:
        """Hands due deliveries to free senders."""
        assert self._senders is not None
        with self._lock:
            busy = set(self._in_flight)
        free = SENDERS - len(busy)
        if free <= 0:
            return
        for row in delivery.due(self.db, free, skip=sorted(busy)):
            assert row.id is not None
            with self._lock:
                self._in_flight.add(row.id)
            self._senders.submit(self._deliver, row)

    def _deliver(self, row: WebhookDelivery) -> None:
        assert row.id is not None and self._http is not None
        try:
            secret = delivery.secret_of(self.db, row.owner)
            attempt = delivery.post(self._http, row, secret)
            settings = self.settings
            delivery.record_delivery_attempt(
                self.db,
                row.id,
                attempt,
                attempts=settings.webhook_attempts,
                backoff_s=settings.webhook_backoff_s,
            )
        except Exception:
            log.exception("job %d: webhook delivery %d failed to run", row.job_id, row.id)
        finally:
            with self._lock:
                self._in_flight.discard(row.id)
            self._loop.wake()  # a sender is free: more may be due
