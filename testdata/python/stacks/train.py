"""A Python trainer over the fake CUDA runtime, for the Python stacks test.

Allocates from named functions in two modules, a class, a generator, a
coroutine run by asyncio, worker threads and a forked worker process, and
writes to $VRAMPROF_TRUTH
every cudaMalloc with the Python stack that made it (see gpu.py).

Usage: python3 train.py   (FAKECUDA_LIB names the runtime to load; with
TRAIN_WAIT_SIGNAL=1 it prints "ready PID" once the model is built and waits
for SIGUSR1 before training, for attach)"""

import asyncio
import json
import os
import signal
import sys
import threading
import time

import gpu
from model import Model, MiB


async def prefetch(n):
    await asyncio.sleep(0)
    return gpu.malloc(n * MiB)


def worker(steps):
    for _ in range(steps):
        gpu.free(gpu.malloc(2 * MiB))


def data_worker(path):
    """A forked worker (as DataLoader's fork start method makes): its own
    allocations, its own truth file, PATH.PID."""
    gpu.calls.clear()
    gpu.free(gpu.malloc(3 * MiB))
    if path:
        write_truth(path + f".{os.getpid()}")


def write_truth(path):
    with open(path + ".tmp", "w") as f:
        json.dump(dict(scenario="python_stacks", pid=os.getpid(), version=list(sys.version_info[:3]),
                       executable=sys.executable, calls=gpu.calls), f)
    os.rename(path + ".tmp", path)


def train(model, steps):
    for step in range(steps):
        model.forward(step)
        time.sleep(0.005)  # the step's compute


def main():
    time.sleep(0.05)  # the runtime arrives after start-up, as with torch
    gpu.load()
    model = Model()
    if os.environ.get("TRAIN_WAIT_SIGNAL"):
        # For attach: say so, then wait until the profiler is live.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        print(f"ready {os.getpid()}", flush=True)
        signal.sigwait({signal.SIGUSR1})
    threads = [threading.Thread(target=worker, args=(5,), name=f"loader-{i}") for i in range(2)]
    for t in threads:
        t.start()
    train(model, 40)
    for t in threads:
        t.join()
    for ptr in model.checkpoint():
        gpu.free(ptr)
    gpu.free(asyncio.run(prefetch(3)))
    path = os.environ.get("VRAMPROF_TRUTH")
    child = os.fork()
    if child == 0:
        data_worker(path)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    if status != 0:
        return 1
    if path:
        write_truth(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
