/*
 * vmm: PyTorch's expandable_segments on the driver's virtual memory API
 * (cuMemAddressReserve/cuMemCreate/cuMemMap), called directly (linked to
 * libcuda.so.1; no runtime).
 *
 * reserve_segment reserves 1 GiB of address space. grow_segment grows the
 * segment at its top in 8 steps of 2, 4, 20, 8, 2, 16, 6, 10 MiB (68 MiB):
 * each step cuMemCreate (device 0, from prop.location.id) + cuMemMap +
 * cuMemSetAccess. shrink_segment unmaps and releases the top 3 steps
 * (10, 6, 16 MiB). scratch_range reserves a second 64 MiB range, backs
 * 8 MiB of it with physical memory on device 1, then unmaps, releases and
 * frees the range. At the end 1 GiB stays reserved, 36 MiB mapped on device 0.
 *
 * Physical memory is usage: totals 9 allocations (76 MiB), 4 frees, peak
 * 68 MiB (71303168), live at end 36 MiB (37748736). Reserved address space
 * is not: vmm.reserved_bytes_peak 1 GiB + 64 MiB.
 */
#include "truth.h"

#include <string.h>

#define NSTEPS 8
#define NSHRINK 3

static const size_t steps_mib[NSTEPS] = {2, 4, 20, 8, 2, 16, 6, 10};

static CUdeviceptr base;
static size_t top;
static CUmemGenericAllocationHandle handles[NSTEPS];
static size_t offsets[NSTEPS];

static CUmemAllocationProp prop_on(int device)
{
	CUmemAllocationProp prop;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = device;
	return prop;
}

NOINLINE void reserve_segment(void)
{
	check_cu(TRUTH_CU_MEM_ADDRESS_RESERVE(&base, 1 * GiB, 0, 0, 0), __func__);
}

NOINLINE void grow_segment(void)
{
	CUmemAllocationProp prop = prop_on(0);
	CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

	for (int i = 0; i < NSTEPS; i++) {
		size_t size = steps_mib[i] * MiB;
		check_cu(TRUTH_CU_MEM_CREATE(&handles[i], size, &prop, 0), __func__);
		check_cu(TRUTH_CU_MEM_MAP(base + top, size, 0, handles[i], 0), __func__);
		check_cu(cuMemSetAccess(base + top, size, &access, 1), __func__);
		offsets[i] = top;
		top += size;
	}
}

NOINLINE void shrink_segment(void)
{
	for (int i = NSTEPS - 1; i >= NSTEPS - NSHRINK; i--) {
		size_t size = steps_mib[i] * MiB;
		check_cu(TRUTH_CU_MEM_UNMAP(base + offsets[i], size), __func__);
		check_cu(TRUTH_CU_MEM_RELEASE(handles[i]), __func__);
		top -= size;
	}
}

NOINLINE void scratch_range(void)
{
	CUmemAllocationProp prop = prop_on(1);
	CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUdeviceptr range;
	CUmemGenericAllocationHandle h;

	check_cu(TRUTH_CU_MEM_ADDRESS_RESERVE(&range, 64 * MiB, 0, 0, 0), __func__);
	check_cu(TRUTH_CU_MEM_CREATE(&h, 8 * MiB, &prop, 0), __func__);
	check_cu(TRUTH_CU_MEM_MAP(range, 8 * MiB, 0, h, 0), __func__);
	check_cu(cuMemSetAccess(range, 8 * MiB, &access, 1), __func__);
	check_cu(TRUTH_CU_MEM_UNMAP(range, 8 * MiB), __func__);
	check_cu(TRUTH_CU_MEM_RELEASE(h), __func__);
	check_cu(TRUTH_CU_MEM_ADDRESS_FREE(range, 64 * MiB), __func__);
}

int main(void)
{
	CUmemAllocationProp prop = prop_on(0);
	size_t gran = 0;

	truth_init("vmm");
	check_cu(cuInit(0), "cuInit");
	check_cu(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
		 "cuMemGetAllocationGranularity");
	if (gran != 2 * MiB)
		return 3;
	reserve_segment();
	grow_segment();
	shrink_segment();
	scratch_range();
	return 0;
}
