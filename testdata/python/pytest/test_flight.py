"""A pytest test long enough for a flight recorder's segments to begin
inside it (`vramprof run --max-trace 64KiB`, cmd/vramprof
TestFlightPytestSegment). It keeps its books (gpubooks.py), written to
$VRAMPROF_TRUTH at exit by pytest's node id.

Only pytest's phases tell its allocations apart: its fixture's are in no
test frame, and its node id holds a parameter set ("[long]") that no frame
names.

The figures, by the test's own arithmetic:
  test_long[long]
              its fixture's A, 4 MiB, allocated in setup and freed in
              teardown; in its call, CHURN_PAIRS (default 3000) allocations
              of 4 KiB, each freed at once, spanning several segments; then
              B, 2 MiB, kept in KEPT (never freed). Peak A + B = 6291456 at
              B's line, leak B = 2097152.

Usage: python3 -m pytest test_flight.py  (FAKECUDA_LIB names the runtime)
"""

import os

import pytest

from gpubooks import MiB, Books, cuda_runtime

alloc, free = cuda_runtime()
KEPT = []  # what test_long never frees
CHURN_PAIRS = int(os.environ.get("CHURN_PAIRS", "3000"))


@pytest.fixture
def weights():
    books = Books(alloc, free)
    a = books.alloc(4 * MiB)
    yield a
    books.free(a)
    books.close()


@pytest.mark.parametrize("pairs", [CHURN_PAIRS], ids=["long"])
def test_long(weights, pairs):
    books = Books(alloc, free)
    for _ in range(pairs):
        books.free(books.alloc(4096))
    KEPT.append(books.alloc(2 * MiB))
    books.close()
