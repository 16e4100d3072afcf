// Package eventtest builds record streams by hand, for tests only: the
// scenarios that analysis's tests check the figures of and report's tests
// check the words of. It imports only probes/event, so that any package's
// tests can use it.
//
// A [Stream] starts as the header, process and mappings of a python run
// (pid 100) and takes events through chained methods; its Recs are what an
// analyzer is fed. [PoolStream] drives a caching allocator on top of it,
// [VMMPool] one with expandable segments ([ExpandableOOMPool]).
// The scenario builders ([LeakStream], [LeakWindowsStream],
// [PinnedStream], [PinMemoryStream], [RanksStream], [SpikeStream], and the
// pools [ScatteredPool], [FragmentationOOMPool], [CapacityOOMPool],
// [RetryPool], [EmptyCachePool], [ReleaseCyclePool]) describe their truths
// in their doc comments; tests assert the values derived from them.
//
// Imports, besides the standard library: probes/event.
package eventtest
