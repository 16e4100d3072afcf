package allocspec

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	specs, err := Parse("my.spec", strings.NewReader(`
# a comment
allocator mypool
library libmypool.so* libother.so
alloc ptr=ret size=arg2 ns::Pool::alloc(unsigned long)
alloc size=arg8 ptr=ret ns::Pool::alloc_many(*)
free ptr=arg2 size=arg3 ns::Pool::free(void*, unsigned long)

allocator cpool
library libc.so
alloc ptr=arg1 size=arg2 c_pool_record
free ptr=arg1 c_pool_forget
`))
	require.NoError(t, err)
	require.Len(t, specs, 2)
	a := specs[0]
	assert.Equal(t, "mypool", a.Name)
	assert.Equal(t, []string{"libmypool.so*", "libother.so"}, a.Libraries)
	assert.Equal(t, 3, a.Line)
	require.Len(t, a.Functions, 3)
	assert.Equal(t, Function{Role: RoleAlloc, Pattern: "ns::Pool::alloc(unsigned long)", Ptr: Loc{Ret: true}, Size: Loc{Arg: 2}, Line: 5}, a.Functions[0])
	assert.Equal(t, Loc{Arg: 8}, a.Functions[1].Size)
	assert.Equal(t, "ns::Pool::alloc_many(*)", a.Functions[1].Pattern)
	assert.Equal(t, Function{Role: RoleFree, Pattern: "ns::Pool::free(void*, unsigned long)", Ptr: Loc{Arg: 2}, Size: Loc{Arg: 3}, Line: 7}, a.Functions[2])
	assert.True(t, a.Functions[0].AtReturn())
	assert.True(t, a.MatchLibrary("libmypool.so.3"))
	assert.False(t, a.MatchLibrary("libmypool2.so"))
	c := specs[1]
	assert.False(t, c.Functions[0].AtReturn(), "an alloc whose pointer is an argument is read at entry")
	assert.False(t, c.Functions[1].Size.Given())
}

// TestParseErrors: each bad file gives one line, file:line, what is wrong
// and what to write.
func TestParseErrors(t *testing.T) {
	const head = "allocator p\nlibrary libp.so\n"
	for _, tc := range []struct {
		name, text, want string
	}{
		{"empty", "# nothing\n", "bad.spec:1: no allocator in the file"},
		{"unknown directive", head + "malloc ptr=ret size=arg1 f(*)\n", `bad.spec:3: unknown directive "malloc"`},
		{"arg0", head + "alloc ptr=ret size=arg0 f(*)\n", "bad.spec:3: size=arg0: arguments count from 1 (`this` is arg1 of a method)"},
		{"arg17", head + "alloc ptr=ret size=arg17 f(*)\n", "bad.spec:3: size=arg17: at most arg16"},
		{"not a location", head + "alloc ptr=rax size=arg1 f(*)\n", "bad.spec:3: ptr=rax: use ret or arg1..arg16"},
		{"no ptr", head + "alloc size=arg1 f(*)\n", "bad.spec:3: alloc needs ptr=: write `alloc ptr=ret ... PATTERN`"},
		{"no size", head + "alloc ptr=ret f(*)\n", "bad.spec:3: alloc needs size=argN"},
		{"size ret", head + "alloc ptr=arg1 size=ret f(*)\n", "bad.spec:3: size=ret: a size is read from an argument"},
		{"free ret", head + "free ptr=ret f(*)\n", "bad.spec:3: free ptr=ret: a free's pointer is one of its arguments"},
		{"twice", head + "alloc ptr=ret ptr=arg1 size=arg2 f(*)\n", "bad.spec:3: ptr is given twice"},
		{"no pattern", head + "free ptr=arg1\n", "bad.spec:3: free names no function"},
		{"no allocator", "library libp.so\n", "bad.spec:1: library before any allocator line"},
		{"alloc first", "alloc ptr=ret size=arg1 f(*)\n", "bad.spec:1: alloc before any allocator line"},
		{"slash", "allocator p\nlibrary /usr/lib/libp.so\n", "bad.spec:2: library glob \"/usr/lib/libp.so\" has a '/': it matches a file's base name only, write `library libp.so`"},
		{"no library", "allocator p\nalloc ptr=ret size=arg1 f(*)\nfree ptr=arg1 g(*)\n", "bad.spec:1: allocator p has no library line"},
		{"no free", head + "alloc ptr=ret size=arg1 f(*)\n", "bad.spec:1: allocator p needs both an alloc and a free line"},
		{"no function", head, "bad.spec:1: allocator p names no function"},
		{"duplicate", head + "alloc ptr=ret size=arg1 f(*)\nfree ptr=arg1 g(*)\nallocator p\n", `bad.spec:5: allocator "p" is defined twice (line 1)`},
		{"name with spaces", "allocator my pool\n", "bad.spec:1: allocator needs one name without spaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.spec", strings.NewReader(tc.text))
			require.Error(t, err)
			var pe *ParseError
			require.True(t, errors.As(err, &pe), "a *ParseError: %v", err)
			assert.True(t, strings.HasPrefix(err.Error(), tc.want), "got %q\nwant prefix %q", err, tc.want)
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

// TestBuiltin: the embedded specs parse, and name the real functions by
// their demangled names (as c++filt prints the symbols of the real
// libraries, and of testdata's fakes built with the same signatures).
func TestBuiltin(t *testing.T) {
	specs := Builtin()
	byName := map[string]*Allocator{}
	for i := range specs {
		byName[specs[i].Name] = &specs[i]
	}
	require.Contains(t, byName, "xla_bfc")
	require.Contains(t, byName, "rmm")
	assert.NotContains(t, byName, "cupy", "CuPy's pool is Cython: nothing to name by symbol")

	match := func(a *Allocator, name string) *Function {
		for i := range a.Functions {
			if a.Functions[i].Match(name) {
				return &a.Functions[i]
			}
		}
		return nil
	}
	bfc := byName["xla_bfc"]
	for _, lib := range []string{"libtensorflow_framework.so.2", "xla_extension.so", "xla_cuda_plugin.so"} {
		assert.True(t, bfc.MatchLibrary(lib), lib)
	}
	for _, tc := range []struct {
		name string
		role Role
		ptr  Loc
		size Loc
	}{
		{"tsl::BFCAllocator::AllocateRaw(unsigned long, unsigned long, tsl::AllocationAttributes const&)", RoleAlloc, Loc{Ret: true}, Loc{Arg: 3}},
		{"tensorflow::BFCAllocator::AllocateRaw(unsigned long, unsigned long, tensorflow::AllocationAttributes const&)", RoleAlloc, Loc{Ret: true}, Loc{Arg: 3}},
		{"tsl::BFCAllocator::DeallocateRaw(void*)", RoleFree, Loc{Arg: 2}, Loc{}},
	} {
		f := match(bfc, tc.name)
		require.NotNil(t, f, tc.name)
		assert.Equal(t, tc.role, f.Role, tc.name)
		assert.Equal(t, tc.ptr, f.Ptr, tc.name)
		assert.Equal(t, tc.size, f.Size, tc.name)
	}
	assert.Nil(t, match(bfc, "tsl::BFCAllocator::AllocateRaw(unsigned long, unsigned long)"),
		"the inline two-argument wrapper calls the three-argument one: probing both would count twice")

	rmm := byName["rmm"]
	assert.True(t, rmm.MatchLibrary("librmm.so"))
	assert.True(t, rmm.MatchLibrary("memory_resource.cpython-311-x86_64-linux-gnu.so"))
	const pool = "rmm::mr::detail::stream_ordered_memory_resource<rmm::mr::pool_memory_resource<rmm::mr::cuda_memory_resource>, rmm::mr::detail::coalescing_free_list>::"
	for _, tc := range []struct {
		name string
		role Role
		ptr  Loc
		size Loc
	}{
		{pool + "do_allocate(unsigned long, rmm::cuda_stream_view)", RoleAlloc, Loc{Ret: true}, Loc{Arg: 2}},
		{pool + "do_allocate(unsigned long, rmm::cuda_stream_view const&)", RoleAlloc, Loc{Ret: true}, Loc{Arg: 2}},
		{pool + "do_deallocate(void*, unsigned long, rmm::cuda_stream_view)", RoleFree, Loc{Arg: 2}, Loc{Arg: 3}},
		{"rmm::mr::arena_memory_resource<rmm::mr::cuda_memory_resource>::do_allocate(unsigned long, rmm::cuda_stream_view)", RoleAlloc, Loc{Ret: true}, Loc{Arg: 2}},
	} {
		f := match(rmm, tc.name)
		require.NotNil(t, f, tc.name)
		assert.Equal(t, tc.role, f.Role, tc.name)
		assert.Equal(t, tc.ptr, f.Ptr, tc.name)
		assert.Equal(t, tc.size, f.Size, tc.name)
	}
	assert.Nil(t, match(rmm, "rmm::mr::cuda_memory_resource::do_allocate(unsigned long, rmm::cuda_stream_view)"),
		"cudaMalloc underneath is the segment layer's")
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"", "", true},
		{"*", "", true},
		{"*", "anything", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbd", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*::f(*)", "ns::C::f(int, long)", true},
		{"*::f(*)", "ns::C::g(int)", false},
		{"operator[](*)", "operator[](unsigned long)", true}, // brackets are literal
		{"ns::T<*>::f(*)", "ns::T<int>::f(void*)", true},
		{"lib*.so*", "libx.so.1", true},
		{"lib*.so*", "libx.a", false},
		{"*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
	} {
		assert.Equal(t, tc.want, Glob(tc.pattern, tc.s), "%q ~ %q", tc.pattern, tc.s)
	}
}
