// The executable: calls the probed functions once.
#include <stddef.h>

struct block {
	long pad;
	size_t size;
	int device;
};

void *sdt_alloc(struct block *b, int device, size_t size);
void sdt_free(void *p);
void sdt_mark(void);
int sdt_guarded(long a, unsigned char b, short c);

int main(void)
{
	struct block b = {0, 64, 1};
	sdt_free(sdt_alloc(&b, 1, 64));
	sdt_mark();
	return sdt_guarded(1, 2, 3) == 6 ? 0 : 1;
}
