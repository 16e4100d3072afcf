"""A model whose forward pass leaks: it keeps one activation per step."""

import gpu

MiB = 1 << 20


class Model:
    def __init__(self):
        self.weights = [gpu.malloc(8 * MiB) for _ in range(2)]
        self.kept = []

    def forward(self, step):
        act = gpu.malloc(4 * MiB)
        self.kept.append(gpu.malloc(MiB))  # the leak: one per step
        gpu.free(act)

    def checkpoint(self):
        return list(self.generate_buffers(2))

    def generate_buffers(self, n):
        for _ in range(n):
            yield gpu.malloc(16 * MiB)
