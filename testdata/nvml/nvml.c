/*
 * nvml.c: a stand-in libnvidia-ml.so.1 with NVML's C ABI (nvml.h is
 * NVIDIA's, as go-nvml ships it), whose figures are the fake driver's live
 * state (../cuda/libcuda.c), for tests and the demo on machines without a
 * GPU. It runs inside the process that samples NVML (vramprof); the fake
 * driver runs inside each traced process and keeps one file per process in
 * FAKECUDA_NVML_DIR, "DEV USED CONTEXT" per line. Every call reads them
 * afresh, so each figure is the drivers' state at that call.
 *
 * FAKENVML_DEVICES devices (default 1, at most the fake driver's 4), index
 * i the fake driver's device i: "NVIDIA H100 80GB HBM3", UUID
 * GPU-f4ce0000-5ca1-4e55-8d1e-00000000000<i>, total FAKECUDA_CAPACITY bytes
 * (default 80 GiB), reserved 0, PCI address 00000000:<0x41 + i>:00.0
 * (v1 and v2 of nvmlDeviceGetPciInfo: 0000:<0x41 + i>:00.0 in
 * busIdLegacy). A running process is one whose file exists
 * and whose pid is alive; its used bytes on device i are its line i's USED
 * + CONTEXT, and it is listed on the devices where that is not 0. A
 * device's used bytes are the sum over running processes, capped at the
 * total; free is the rest.
 *
 * Exports the entry points go-nvml binds for vramprof's sampler, each
 * versioned one beside its unversioned ancestor (the v1 process lists use
 * the 16-byte nvmlProcessInfo_v1_t, _v2 and _v3 the 24-byte
 * nvmlProcessInfo_t). Built four times (testdata/Makefile): build/nvml/
 * with everything; build/nvml-v1/ (-DFAKENVML_V1_ONLY) without
 * nvmlDeviceGetMemoryInfo_v2 and the _v2/_v3 process lists, as an older
 * driver's library; build/nvml-latest/ (-DFAKENVML_LATEST_ONLY) with only
 * the newest version of each function (nvmlInit_v2, nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetMemoryInfo_v2, the _v3
 * process lists); build/nvml-noprocs/ (-DFAKENVML_NO_PROCESS_LISTS)
 * without any process list.
 *
 * Failures on demand, from the environment of the process that loads it:
 *   FAKENVML_LOST_AFTER=N     the memory-info call after N successful ones,
 *                             and every device call after it, fail with
 *                             NVML_ERROR_GPU_IS_LOST (a tick is whole: its
 *                             process lists are the GPU's)
 *   FAKENVML_PROCESSES=not_supported
 *                             process lists fail with NVML_ERROR_NOT_SUPPORTED
 *                             (MIG, vGPU guests)
 *   FAKENVML_DELAY_MS=N       every memory-info call sleeps N ms first
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include "nvml.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#define API __attribute__((visibility("default")))

#define DEFAULT_TOTAL (80ULL << 30)
#define NAME "NVIDIA H100 80GB HBM3"
#define UUID_PREFIX "GPU-f4ce0000-5ca1-4e55-8d1e-00000000000" /* + the index */
#define MAX_PROCS 1024
/* MAX_DEVICES is the fake driver's device count (../cuda/libcuda.c NDEV). */
#define MAX_DEVICES 4

struct nvmlDevice_st {
	unsigned index;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int inits;
static struct nvmlDevice_st devices[MAX_DEVICES] = {{0}, {1}, {2}, {3}};
static unsigned long long memory_calls;
static int lost; /* FAKENVML_LOST_AFTER reached: the GPU is gone for good */

struct proc {
	unsigned pid;
	unsigned long long used;
};

static unsigned long long env_ull(const char *name, unsigned long long def)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (s == NULL || *s == '\0')
		return def;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return def;
	return v;
}

static unsigned long long total(void)
{
	return env_ull("FAKECUDA_CAPACITY", DEFAULT_TOTAL);
}

static int alive(unsigned pid)
{
	return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* read_procs fills ps with the running processes on device dev; it
 * returns how many (at most MAX_PROCS). */
static unsigned read_procs(unsigned dev_index, struct proc *ps)
{
	const char *dir = getenv("FAKECUDA_NVML_DIR");
	char path[4096];
	struct dirent *e;
	unsigned n = 0;
	DIR *d;

	if (dir == NULL || *dir == '\0' || (d = opendir(dir)) == NULL)
		return 0;
	while (n < MAX_PROCS && (e = readdir(d)) != NULL) {
		unsigned long long used, ctx;
		char *end;
		unsigned long pid = strtoul(e->d_name, &end, 10);
		FILE *f;
		int dev, ok = 0;

		if (e->d_name[0] < '1' || e->d_name[0] > '9' || *end != '\0' || !alive((unsigned)pid))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue; /* exited between readdir and open */
		while (fscanf(f, "%d %llu %llu", &dev, &used, &ctx) == 3)
			if (dev == (int)dev_index) {
				ok = 1;
				break;
			}
		fclose(f);
		if (ok && used + ctx > 0) {
			ps[n].pid = (unsigned)pid;
			ps[n].used = used + ctx;
			n++;
		}
	}
	closedir(d);
	return n;
}

/* device_count is FAKENVML_DEVICES, clamped to [1, MAX_DEVICES]. */
static unsigned device_count(void)
{
	unsigned long long n = env_ull("FAKENVML_DEVICES", 1);

	return n < 1 ? 1 : n > MAX_DEVICES ? MAX_DEVICES : (unsigned)n;
}

static nvmlReturn_t check_device(nvmlDevice_t device)
{
	nvmlReturn_t r = NVML_SUCCESS;

	pthread_mutex_lock(&mu);
	if (inits == 0)
		r = NVML_ERROR_UNINITIALIZED;
	else if (device.handle < &devices[0] || device.handle >= &devices[device_count()])
		r = NVML_ERROR_INVALID_ARGUMENT;
	else if (lost)
		r = NVML_ERROR_GPU_IS_LOST;
	pthread_mutex_unlock(&mu);
	return r;
}

static nvmlReturn_t memory(nvmlDevice_t device, unsigned long long *tot, unsigned long long *free,
			   unsigned long long *used)
{
	static struct proc ps[MAX_PROCS];
	unsigned long long delay = env_ull("FAKENVML_DELAY_MS", 0), sum = 0;
	nvmlReturn_t r = check_device(device);
	unsigned n;

	if (r != NVML_SUCCESS)
		return r;
	if (delay > 0) {
		struct timespec ts = {(time_t)(delay / 1000), (long)(delay % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&mu);
	if (memory_calls >= env_ull("FAKENVML_LOST_AFTER", ~0ULL)) {
		lost = 1;
		pthread_mutex_unlock(&mu);
		return NVML_ERROR_GPU_IS_LOST;
	}
	n = read_procs(device.handle->index, ps);
	for (unsigned i = 0; i < n; i++)
		sum += ps[i].used;
	memory_calls++;
	pthread_mutex_unlock(&mu);
	*tot = total();
	*used = sum < *tot ? sum : *tot;
	*free = *tot - *used;
	return NVML_SUCCESS;
}

#ifndef FAKENVML_NO_PROCESS_LISTS
/* processes is every process list: elem bytes per entry, v1 without the
 * instance ids. */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned *count, void *infos, size_t elem, int compute)
{
	static struct proc ps[MAX_PROCS];
	nvmlReturn_t r = check_device(device);
	unsigned n = 0;

	if (r != NVML_SUCCESS)
		return r;
	if (count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	{
		const char *s = getenv("FAKENVML_PROCESSES");
		if (s && strcmp(s, "not_supported") == 0)
			return NVML_ERROR_NOT_SUPPORTED;
	}
	pthread_mutex_lock(&mu);
	if (compute)
		n = read_procs(device.handle->index, ps);
	if (*count < n || (infos == NULL && n > 0)) {
		*count = n;
		pthread_mutex_unlock(&mu);
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned i = 0; i < n; i++) {
		if (elem == sizeof(nvmlProcessInfo_v1_t)) {
			nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
			p->pid = ps[i].pid;
			p->usedGpuMemory = ps[i].used;
		} else {
			nvmlProcessInfo_t *p = (nvmlProcessInfo_t *)infos + i;
			p->pid = ps[i].pid;
			p->usedGpuMemory = ps[i].used;
			p->gpuInstanceId = 0xFFFFFFFFu;
			p->computeInstanceId = 0xFFFFFFFFu;
		}
	}
	*count = n;
	pthread_mutex_unlock(&mu);
	return NVML_SUCCESS;
}
#endif

/* ---- initialization ---- */

static nvmlReturn_t init(void)
{
	pthread_mutex_lock(&mu);
	inits++;
	pthread_mutex_unlock(&mu);
	return NVML_SUCCESS;
}

#ifndef FAKENVML_LATEST_ONLY
API nvmlReturn_t nvmlInit(void)
{
	return init();
}
#endif

API nvmlReturn_t nvmlInit_v2(void)
{
	return init();
}

API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	(void)flags;
	return init();
}

API nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t r = NVML_SUCCESS;

	pthread_mutex_lock(&mu);
	if (inits == 0)
		r = NVML_ERROR_UNINITIALIZED;
	else
		inits--;
	pthread_mutex_unlock(&mu);
	return r;
}

API const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_GPU_IS_LOST:
		return "GPU is lost";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
		return "Argument Version Mismatch";
	default:
		return "Unknown Error";
	}
}

/* ---- devices ---- */

static nvmlReturn_t count(unsigned *n)
{
	nvmlReturn_t r = NVML_SUCCESS;

	if (n == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	pthread_mutex_lock(&mu);
	if (inits == 0)
		r = NVML_ERROR_UNINITIALIZED;
	else
		*n = device_count();
	pthread_mutex_unlock(&mu);
	return r;
}

#ifndef FAKENVML_LATEST_ONLY
API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
	return count(deviceCount);
}
#endif

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
	return count(deviceCount);
}

static nvmlReturn_t handle(unsigned index, nvmlDevice_t *device)
{
	unsigned n;
	nvmlReturn_t r = count(&n);

	if (r != NVML_SUCCESS)
		return r;
	if (device == NULL || index >= n)
		return NVML_ERROR_INVALID_ARGUMENT;
	device->handle = &devices[index];
	return NVML_SUCCESS;
}

#ifndef FAKENVML_LATEST_ONLY
API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
	return handle(index, device);
}
#endif

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	return handle(index, device);
}

static nvmlReturn_t copy_string(nvmlDevice_t device, char *out, unsigned length, const char *s)
{
	nvmlReturn_t r = check_device(device);

	if (r != NVML_SUCCESS)
		return r;
	if (out == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (length < strlen(s) + 1)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	strcpy(out, s);
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	return copy_string(device, name, length, NAME);
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	char s[sizeof(UUID_PREFIX) + 1];
	nvmlReturn_t r = check_device(device);

	if (r != NVML_SUCCESS)
		return r;
	snprintf(s, sizeof(s), UUID_PREFIX "%u", device.handle->index);
	return copy_string(device, uuid, length, s);
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	nvmlReturn_t r = check_device(device);

	if (r != NVML_SUCCESS)
		return r;
	if (index == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*index = device.handle->index;
	return NVML_SUCCESS;
}

/* ---- the PCI address ---- */

/* Device i is at PCI address 00000000:<0x41 + i>:00.0 (dcgm-exporter's
 * pci_bus_id label). */
#define PCI_BUS_BASE 0x41

/* v1 and v2 fill what their nvmlPciInfo_t had: the fields before busId
 * (the 16-byte address, now busIdLegacy); v3 fills busId as well. */
static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci, int v3)
{
	nvmlReturn_t r = check_device(device);

	if (r != NVML_SUCCESS)
		return r;
	if (pci == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(pci, 0, offsetof(nvmlPciInfo_t, busId));
	pci->domain = 0;
	pci->bus = PCI_BUS_BASE + device.handle->index;
	pci->device = 0;
	pci->pciDeviceId = 0x233010de; /* H100 SXM5 80GB, NVIDIA's vendor id */
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, pci->domain, pci->bus,
		 pci->device);
	if (v3)
		snprintf(pci->busId, sizeof(pci->busId), NVML_DEVICE_PCI_BUS_ID_FMT, pci->domain, pci->bus,
			 pci->device);
	return NVML_SUCCESS;
}

#ifndef FAKENVML_LATEST_ONLY
API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	return pci_info(device, pci, 0);
}
#endif

#ifndef FAKENVML_V1_ONLY
#ifndef FAKENVML_LATEST_ONLY
API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	return pci_info(device, pci, 0);
}
#endif

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	return pci_info(device, pci, 1);
}
#endif

/* ---- memory ---- */

#ifndef FAKENVML_LATEST_ONLY
API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m)
{
	if (m == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return memory(device, &m->total, &m->free, &m->used);
}
#endif

#ifndef FAKENVML_V1_ONLY
/* The caller states the layout it passes: anything but nvmlMemory_v2 is
 * refused, as NVIDIA's library refuses it. */
API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m)
{
	if (m == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (m->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	m->reserved = 0;
	return memory(device, &m->total, &m->free, &m->used);
}
#endif

/* ---- running processes ---- */

#ifndef FAKENVML_NO_PROCESS_LISTS
#ifndef FAKENVML_LATEST_ONLY
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
						      nvmlProcessInfo_v1_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 1);
}

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
						       nvmlProcessInfo_v1_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 0);
}
#endif

#ifndef FAKENVML_V1_ONLY
#ifndef FAKENVML_LATEST_ONLY
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
							 nvmlProcessInfo_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 1);
}
#endif

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
							 nvmlProcessInfo_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 1);
}

#ifndef FAKENVML_LATEST_ONLY
API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
							  nvmlProcessInfo_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 0);
}
#endif

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
							  nvmlProcessInfo_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 0);
}
#endif
#endif /* FAKENVML_NO_PROCESS_LISTS */
