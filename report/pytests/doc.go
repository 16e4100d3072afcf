// Package pytests gives each pytest test in a recording its own GPU memory
// figures, with no plugin in the tests: under `vramprof check -- pytest
// ...` pytest announces the test it runs (PYTEST_CURRENT_TEST, which the
// probes see set and unset: event.TestPhase), and every allocation's stack
// holds the Python frames of the call (probes/python), the test function
// among them. A test's Basis says which of the two told its allocations
// apart.
//
// # Which test an allocation belongs to: pytest's phases
//
// Before each phase of a test pytest sets PYTEST_CURRENT_TEST to
// "<nodeid> (setup|call|teardown)", and it removes the variable after the
// teardown. In a process whose TestPhase records are in the stream, an
// allocation belongs to the test whose id the variable held when it was
// made, whatever its stack (BasisPhases):
//
//   - the id is pytest's node id with its parameter set, "path::[Class::]
//     name[params]": each parameter set is a test of its own;
//   - setup and teardown are the test's: a fixture's memory is the test's
//     that set it up. A fixture of a wider scope (module, session) is set
//     up in the first test that uses it and torn down in the last one's
//     teardown: its memory is the first test's, and is in that test's leak;
//   - an allocation made while no test runs (collection, module level,
//     between tests) belongs to no test, even from a test function's frame;
//   - memory made in other threads while a test runs is the test's: the
//     variable is the process's.
//
// # Which test an allocation belongs to: frames
//
// A recording without TestPhase records for a process (made before they
// were, or of a Python whose libc vramprof could not probe) falls back to
// the frames (BasisFrames). A test is the Python frame pytest calls it
// through: a function whose
// name starts with "test", in a file named test_*.py or *_test.py (pytest's
// default discovery), at module level or a method of classes whose names
// start with "Test" (its co_qualname, CPython 3.11+: "TestModel.test_big").
// Its id is pytest's node id, "path::[Class::]name", the path relative to
// the root given (check's working directory: pytest's rootdir when pytest
// runs from the project's top, as usual). An allocation belongs to the
// innermost test frame on its stack (a test calling another test function
// charges the callee); one with none (fixtures, collection, module level,
// pytest itself) belongs to no test. Limits of what frames show:
//
//   - a parametrized test's parameter sets run the same function, and no
//     frame tells them apart: they are one test, "path::name" without the
//     "[...]", their figures together;
//   - a fixture's allocations are the fixture's, not the test's: pytest
//     calls fixtures outside the test function;
//   - CPython 3.10 has no co_qualname: a method's id lacks its class;
//   - a stack cut short on its root side (deeper than --python-depth
//     frames from the leaf) may lose the test frame: the allocation then
//     belongs to no test.
//
// Under either basis, a test's peak site is the test frame in the stack of
// the allocation that reached its peak: none when that allocation was a
// fixture's.
//
// # The figures
//
// Device memory, of the test's own allocations only, at the block layer
// (tensors) when the recording traced a caching allocator, else at the
// segment layer (what report.json's totals count: allocations and physical
// VMM memory), as analysis/ledger models them:
//
//   - peak: the most bytes of the test's allocations live at once. Memory
//     other tests (or, under BasisFrames, fixtures) hold is not in it, so
//     a test's figure does not depend on the order tests run in;
//   - leaked: the bytes of its allocations still live when it was over.
//     Under BasisPhases, when its teardown ended (the variable removed),
//     or at the end of the recording for a test still running then:
//     memory freed after that (by a later test, at exit) is still its
//     leak. Under BasisFrames, when the next test made its first call, or
//     at the end of the recording for the last one. A return makes no
//     event and a free's stack holds no Python frames, so the moment the
//     test function returned is not seen: its fixtures' teardown, which
//     runs before the next test, may still free its memory (then it is
//     not leaked), and the last test's leak is what the process held when
//     it ended. A parametrized test's leak is what all its parameter sets
//     left live.
//
// Tests in several processes (pytest-xdist workers) are matched by id.
//
// A flight recorder's segment begins with the phases of the test each
// process was running when the segment began (their own records again,
// times included), then the allocations its checkpoint restores (flagged
// event.FlagRestored): read alone, or as the oldest segment kept, the
// running test is known from its first event on. A restored allocation
// made since that test began is the test's; one made before belongs to no
// test (which test made it is not in the segment). What the test allocated
// and freed before the segment is not either: its peak there is the most
// the segment shows live at once.
//
// Under a caching allocator (PyTorch) the segment layer is the cache: a
// segment stays cached after the test that made it and later tests reuse
// it, so its figures would say which test grew the cache, not what each
// needed; hence the blocks.
//
// A Tracker is fed a stream's records in order (Add) and read at the end
// (Tests). It is not safe for concurrent use.
//
// Imports, besides the standard library: analysis/ledger and probes/event.
package pytests
