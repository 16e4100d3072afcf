package event

// DeviceRule is how an event's Device is decided, by its Kind (DESIGN.md,
// "Device attribution"). It is stated here once: the probes apply it as
// they decode a record, the analysis as it lists the devices in use.
type DeviceRule uint8

// Device rules.
const (
	// DeviceRecorded: Device is as recorded. The call names its device
	// (KindCreate: the location cuMemCreate was given; KindSetDevice: the
	// device chosen; KindOOMReport: the allocator's device), or the event
	// changes no memory.
	DeviceRecorded DeviceRule = iota
	// DeviceNone: pinned host memory and reserved address space are on no
	// device. Device is DeviceUnknown, whatever device the calling thread
	// had chosen.
	DeviceNone
	// DeviceCaller: the memory is on the calling thread's current device,
	// DeviceUnknown until the thread chose one (KindAlloc, KindFree; a
	// framework's USDT probe names its block's device instead). A thread
	// that has not chosen uses device 0, CUDA's default, but that is known
	// only for a process seen from its start; for one attached later, an
	// allocation's address may tell (each device hands out its own part of
	// the unified address space). A thread that chose a device the probes
	// cannot know (a cuCtxSetCurrent of a context not seen made, which
	// may fail; its current context destroyed) stays DeviceUnknown.
	DeviceCaller
	// DeviceHandle: the memory is on its allocation handle's device, which
	// cuMemCreate named (KindMap, KindUnmap, KindRelease). Device is the
	// calling thread's, often not chosen yet: it names no device in use.
	DeviceHandle
)

// DeviceRule returns the rule that decides the Device of an event of kind
// k.
func (k Kind) DeviceRule() DeviceRule {
	switch k {
	case KindHostAlloc, KindHostFree, KindReserve, KindUnreserve:
		return DeviceNone
	case KindAlloc, KindFree:
		return DeviceCaller
	case KindMap, KindUnmap, KindRelease:
		return DeviceHandle
	}
	return DeviceRecorded
}
