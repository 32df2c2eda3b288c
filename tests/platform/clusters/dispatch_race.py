"""Two dispatches at once, in two threads (two transactions on PostgreSQL): the first is
held open at a moment its test chooses (the test's wrapper of a real function sets `inside`
there and waits for `release`), the second starts meanwhile."""

import threading

from django.db import connection

from paddock.clusters.dispatch import dispatch_prepare


def dispatch_two_at_once(
    first_pk: int, second_pk: int, inside: threading.Event, release: threading.Event
) -> tuple[dict, list[str], bool]:
    """Dispatch `first_pk`, wait until it is held, dispatch `second_pk`, let the first go.
    Returns the orders by run id (None where a dispatch queued its run), the errors raised,
    and whether the second was still waiting a second after it started."""
    orders, errors = {}, []

    def dispatch(run_pk):
        try:
            orders[run_pk] = dispatch_prepare(run_id=run_pk)
        except Exception as exc:  # noqa: BLE001  (what the tests are about)
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()

    one = threading.Thread(target=dispatch, args=(first_pk,))
    one.start()
    assert inside.wait(30)
    two = threading.Thread(target=dispatch, args=(second_pk,))
    two.start()
    two.join(1.0)
    waited = two.is_alive()  # on the row or the index the first dispatch holds
    release.set()
    one.join(30), two.join(30)
    return {pk: orders.get(pk) for pk in (first_pk, second_pk)}, errors, waited
