// libfoo.c: a shared library whose foo is versioned (foo@@LIBFOO_1.0) with
// an older non-default version beside it (foo@LIBFOO_0.9).
__attribute__((symver("foo@LIBFOO_0.9"))) int foo_old(int x) {
	return x;
}

int foo(int x) { // LINE_FOO
	return x * 3;
}

// bare is a function symbol of size 0, as hand-written assembly often has:
// it must still be found by name.
__asm__(".globl bare\n.type bare, @function\nbare:\n\tret\n");
