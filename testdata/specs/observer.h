/*
 * observer.h: how the fake allocator libraries tell a scenario's truth log
 * about the segments they get from CUDA, without linking the log in (the
 * caching allocator in ../c10 does the same). func is the C++ function
 * that made the call.
 */
#ifndef FAKE_OBSERVER_H
#define FAKE_OBSERVER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fake_observer {
	void (*seg_alloc)(const char *func, int ret, void *ptr, size_t size);
	void (*seg_free)(const char *func, int ret, void *ptr);
};

#ifdef __cplusplus
}
#endif

#endif
