// A probe guarded by a semaphore, in its own translation unit: with
// _SDT_HAS_SEMAPHORES every probe of the unit references a semaphore.
#define _SDT_HAS_SEMAPHORES 1
#include <stddef.h>
#include <sys/sdt.h>

unsigned short vramtest_guarded_semaphore __attribute__((unused)) __attribute__((section(".probes")));

__attribute__((noinline)) int sdt_guarded(long a, unsigned char b, short c)
{
	if (vramtest_guarded_semaphore)
		STAP_PROBE3(vramtest, guarded, a, b, c);
	return (int)a + b + c;
}
