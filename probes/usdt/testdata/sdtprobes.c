// Probes without semaphores, as most USDT users write them. Built into
// libsdt.so and into the sdtprog executable by the tests; the argument
// kinds cover what <sys/sdt.h> makes gcc emit on x86-64.
#include <stddef.h>
#include <stdlib.h>
#include <sys/sdt.h>

struct block {
	long pad;
	size_t size;
	int device;
};

// counter is a global: gcc passes it as a %rip-relative memory operand,
// which the parser reports as unsupported.
int counter;

__attribute__((noinline)) void *sdt_alloc(struct block *b, int device, size_t size)
{
	void *p = malloc(size);
	// A pointer, an int, a size_t and a struct field in memory.
	DTRACE_PROBE4(vramtest, alloc, p, device, size, b->size);
	return p;
}

__attribute__((noinline)) void sdt_free(void *p)
{
	// A negative constant and a global.
	STAP_PROBE3(vramtest, free, p, -5, counter);
	counter++;
	free(p);
}

__attribute__((noinline)) void sdt_mark(void)
{
	STAP_PROBE(vramtest, mark);
}
