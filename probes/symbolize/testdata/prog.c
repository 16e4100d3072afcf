// prog.c: a target for the symbolizer tests. It calls through a known
// stack, prints the addresses the test resolves, and waits on stdin so the
// test can read its /proc/PID/maps. Built as PIE and as non-PIE.
#include <dlfcn.h>
#include <stdio.h>

extern int foo(int); // libfoo.so, foo@@LIBFOO_1.0

static void *ret_addr;

__attribute__((noinline)) int leaf(int x) { // LINE_LEAF
	ret_addr = __builtin_return_address(0);
	return x + 1;
}

__attribute__((noinline)) int caller(int x) {
	int r = leaf(x); // LINE_CALL
	return r * 2;
}

int main(void) {
	int r = caller(1) + foo(2);
	// dlsym, not &foo: a non-PIE executable's &foo is its own PLT stub.
	printf("%p %p %p\n", (void *)leaf, ret_addr, dlsym(RTLD_DEFAULT, "foo"));
	fflush(stdout);
	getchar();
	return r == 0;
}
