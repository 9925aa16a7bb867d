"""A PostgreSQL store outlives its server restarting: each store operation that loses its
connection (OperationalError, InterfaceError) is tried again with backoff for up to RETRY_S, so
agents carry on and a result reported while the server was down is written once it is back.
Only the outermost operation retries (one that calls another does not multiply the waits);
SQLite stores never retry (their busy timeout already waits for the lock)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError

from trainer.sweep.store.storage import RETRIED, Storage, unreachable_error

RETRY_S = 60.0  # how long an operation waits for its server to come back
FIRST_WAIT_S = 0.2
LONGEST_WAIT_S = 5.0

F = TypeVar("F", bound=Callable[..., Any])


def _storage(owner: Any) -> Storage:
    """The storage of a store (`.storage`) or of an object holding one (`.store.storage`)."""
    found = getattr(owner, "storage", None)
    return found if isinstance(found, Storage) else owner.store.storage


def attempts(run: Callable[[], Any], storage: Storage, deadline_s: float = RETRY_S) -> Any:
    """`run()`, again after a lost connection, with a doubling wait, for up to `deadline_s`;
    then the server's reason as a StorageError (exit 1: the sweep had started)."""
    end, wait = time.monotonic() + deadline_s, FIRST_WAIT_S
    while True:
        try:
            return run()
        except (OperationalError, InterfaceError) as err:
            if time.monotonic() + wait > end:
                error = unreachable_error(storage, err)
                error.exit_code = 1
                raise error from None
            time.sleep(wait)
            wait = min(2 * wait, LONGEST_WAIT_S)


def retrying(method: F) -> F:
    """Decorate a store operation (a method of the store, or of an object with `.store`)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        storage = _storage(self)
        if storage.is_sqlite or RETRIED.get():
            return method(self, *args, **kwargs)
        token = RETRIED.set(True)
        try:
            return attempts(lambda: method(self, *args, **kwargs), storage)
        finally:
            RETRIED.reset(token)

    return wrapper  # type: ignore[return-value]
