"""Pytest tests that allocate tensors through the fake PyTorch caching
allocator (testdata/c10, ctypes), for the per-test figures at the block
layer (cmd/vramprof TestCheckPerTestBlocks). Each keeps its own books
(gpubooks.py), written to $VRAMPROF_TRUTH at exit by pytest's node id.

The allocator keeps its segments cached: test_blocks' 3 MiB and 2 MiB come
from one 20 MiB segment, test_reuse's 4 MiB from the same cached segment (no
cudaMalloc at all), so only the blocks tell the tests apart:
  test_blocks   3 MiB and 2 MiB live together, the 2 MiB kept in KEPT:
                peak 5242880, leak 2097152
  test_reuse    4 MiB, freed: peak 4194304, leak 0

Usage: python3 -m pytest test_pool.py  (C10_LIB names libc10_cuda.so)
"""

from gpubooks import MiB, Books, caching_allocator

alloc, free = caching_allocator()
KEPT = []


def test_blocks():
    books = Books(alloc, free)
    a = books.alloc(3 * MiB)
    KEPT.append(books.alloc(2 * MiB))
    books.free(a)
    books.close()


def test_reuse():
    books = Books(alloc, free)
    books.free(books.alloc(4 * MiB))
    books.close()
