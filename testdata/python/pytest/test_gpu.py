"""Pytest tests that allocate GPU memory through the fake CUDA runtime
(ctypes), for `vramprof check --max-peak-per-test` (cmd/vramprof
TestCheckPerTest). Each keeps its own books (gpubooks.py), written to
$VRAMPROF_TRUTH at exit by pytest's node id.

The figures, by the tests' own arithmetic:
  test_small            8 MiB and 4 MiB + 512 live together, both freed:
                        peak 12583424, leak 0
  test_leaks            16 MiB freed, then 3 MiB + 4096 kept in KEPT (never
                        freed): peak 16777216, leak 3149824
  TestModel::test_big   64 MiB and 32 MiB live together, freed: peak
                        100663296, leak 0 (over the limits file's 80MiB)
  test_param[1], [2], [3]
                        n MiB each, freed: three tests, peaks 1048576,
                        2097152, 3145728, leak 0 (test_param[3] over the
                        limits file's 2MiB for it)
  test_fixture          its fixture's 6 MiB (allocated in setup, freed in
                        teardown) and 2 MiB of its own live together,
                        freed: peak 8388608, leak 0
and at module level (no test) 1 MiB that stays live: in no test's figures.

Usage: python3 -m pytest test_gpu.py  (FAKECUDA_LIB names the runtime)
"""

import pytest

from gpubooks import MiB, Books, cuda_runtime

alloc, free = cuda_runtime()
KEPT = []  # what test_leaks never frees

# At import (collection), outside every test: no test's memory.
module_buffer = alloc(MiB)


def test_small():
    books = Books(alloc, free)
    a = books.alloc(8 * MiB)
    b = books.alloc(4 * MiB + 512)
    books.free(a)
    books.free(b)
    books.close()


def test_leaks():
    books = Books(alloc, free)
    scratch = books.alloc(16 * MiB)
    books.free(scratch)
    KEPT.append(books.alloc(3 * MiB + 4096))
    books.close()


class TestModel:
    def test_big(self):
        books = Books(alloc, free)
        weights = books.alloc(64 * MiB)
        activations = books.alloc(32 * MiB)
        books.free(activations)
        books.free(weights)
        books.close()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_param(n):
    books = Books(alloc, free)
    books.free(books.alloc(n * MiB))
    books.close()


@pytest.fixture
def gpu_buffer():
    # Setup and teardown run while PYTEST_CURRENT_TEST names the test:
    # the books are test_fixture's.
    books = Books(alloc, free)
    buf = books.alloc(6 * MiB)
    yield buf
    books.free(buf)
    books.close()


def test_fixture(gpu_buffer):
    books = Books(alloc, free)
    books.free(books.alloc(2 * MiB))
    books.close()
