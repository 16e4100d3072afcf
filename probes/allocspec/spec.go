package allocspec

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// The spec format, one directive a line ('#' starts a comment line):
//
//	allocator NAME
//	library GLOB [GLOB...]
//	alloc ptr=ret|argN size=argN PATTERN
//	free  ptr=argN [size=argN] PATTERN
//
// allocator opens a spec; library lists the globs matched against the base
// name of each file a target maps (libtensorflow_framework.so*); alloc and
// free name the functions, PATTERN (the rest of the line, spaces
// included) being a glob on the demangled name with its parameters, as
// c++filt prints it: "tsl::BFCAllocator::DeallocateRaw(void*)"; a C
// function's name is its symbol, without parameters ("my_pool_alloc"). In
// globs,
// * matches any run of characters and ? one character; everything else is
// literal.
//
// Locations: argN is the N-th integer or pointer argument, from 1, `this`
// being arg1 of a method (the System V x86-64 ABI: arg1-arg6 in registers,
// arg7-arg16 on the stack at entry); ret is the return value, read at the
// function's return instructions. An alloc whose ptr is an argument (a
// function that records a block someone else carved) is read at its entry
// alone. A free's size is optional: the block's size is known from its
// allocation.

// Role says what a function does to a block.
type Role uint8

// Roles.
const (
	RoleAlloc Role = iota + 1
	RoleFree
)

func (r Role) String() string {
	switch r {
	case RoleAlloc:
		return "alloc"
	case RoleFree:
		return "free"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// MaxArg is the highest argument position a spec may name: arg7 and above
// are read from the stack at entry, and sixteen covers every allocator
// signature seen.
const MaxArg = 16

// Loc is where a value is: an argument (Arg, 1-based) or the return value
// (Ret). The zero Loc is "not given".
type Loc struct {
	Arg int
	Ret bool
}

// Given reports whether the location was set.
func (l Loc) Given() bool { return l.Ret || l.Arg > 0 }

func (l Loc) String() string {
	switch {
	case l.Ret:
		return "ret"
	case l.Arg > 0:
		return "arg" + strconv.Itoa(l.Arg)
	}
	return "none"
}

// Function is one allocating or freeing function of an allocator.
type Function struct {
	Role    Role
	Pattern string // glob on the demangled name, parameters included
	Ptr     Loc
	Size    Loc // not given for a free that does not pass it
	Line    int // where the spec file says so
}

// AtReturn reports whether the function's record is completed at its
// return instructions (its pointer is its result).
func (f *Function) AtReturn() bool { return f.Ptr.Ret }

// Match reports whether a demangled name is one of the function's.
func (f *Function) Match(demangled string) bool { return Glob(f.Pattern, demangled) }

// Allocator is one allocator's spec.
type Allocator struct {
	Name      string
	Libraries []string // globs on a mapped file's base name
	Functions []Function
	File      string // the spec file ("builtin" for the embedded ones)
	Line      int    // of its allocator line
}

// MatchLibrary reports whether a mapped file, by its base name, may hold
// the allocator's functions.
func (a *Allocator) MatchLibrary(base string) bool {
	for _, g := range a.Libraries {
		if Glob(g, base) {
			return true
		}
	}
	return false
}

// ParseError is a spec file's first error: where, what, and what to write
// instead, on one line.
type ParseError struct {
	File string
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

//go:embed builtin.specs
var builtinText string

// Builtin returns the embedded specs: XLA/TensorFlow's BFC allocator and
// RMM's pools (builtin.specs says why CuPy is not among them).
func Builtin() []Allocator {
	specs, err := Parse("builtin", strings.NewReader(builtinText))
	if err != nil {
		panic(err) // the embedded file is tested
	}
	return specs
}

// ReadFile parses the spec file at path.
func ReadFile(path string) ([]Allocator, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read allocator specs: %w", err)
	}
	defer f.Close()
	return Parse(path, f)
}

// Parse reads specs from r; name is the file name errors carry. Errors are
// *ParseError, one line each.
func Parse(name string, r io.Reader) ([]Allocator, error) {
	var out []Allocator
	sc := bufio.NewScanner(r)
	n := 0
	fail := func(format string, args ...any) error {
		return &ParseError{File: name, Line: n, Msg: fmt.Sprintf(format, args...)}
	}
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		var cur *Allocator
		if len(out) > 0 {
			cur = &out[len(out)-1]
		}
		switch word {
		case "allocator":
			if rest == "" || strings.ContainsAny(rest, " \t") {
				return nil, fail("allocator needs one name without spaces: write `allocator my_pool`")
			}
			for _, a := range out {
				if a.Name == rest {
					return nil, fail("allocator %q is defined twice (line %d): give each its own name", rest, a.Line)
				}
			}
			if cur != nil {
				if err := complete(name, cur); err != nil {
					return nil, err
				}
			}
			out = append(out, Allocator{Name: rest, File: name, Line: n})
		case "library":
			if cur == nil {
				return nil, fail("library before any allocator line: start the spec with `allocator NAME`")
			}
			if rest == "" {
				return nil, fail("library needs at least one glob on a file's base name: write `library libmypool.so*`")
			}
			for _, g := range strings.Fields(rest) {
				if strings.Contains(g, "/") {
					return nil, fail("library glob %q has a '/': it matches a file's base name only, write `library %s`", g, g[strings.LastIndex(g, "/")+1:])
				}
				cur.Libraries = append(cur.Libraries, g)
			}
		case "alloc", "free":
			if cur == nil {
				return nil, fail("%s before any allocator line: start the spec with `allocator NAME`", word)
			}
			fn, msg := parseFunction(word, rest)
			if msg != "" {
				return nil, fail("%s", msg)
			}
			fn.Line = n
			cur.Functions = append(cur.Functions, fn)
		default:
			return nil, fail("unknown directive %q: a line is `allocator NAME`, `library GLOB...`, `alloc ptr=ret size=argN PATTERN`, `free ptr=argN PATTERN` or a # comment", word)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, &ParseError{File: name, Line: n, Msg: "no allocator in the file: write `allocator NAME`, `library GLOB`, then alloc and free lines"}
	}
	if err := complete(name, &out[len(out)-1]); err != nil {
		return nil, err
	}
	return out, nil
}

// complete checks an allocator once its lines are all read.
func complete(file string, a *Allocator) error {
	switch {
	case len(a.Libraries) == 0:
		return &ParseError{File: file, Line: a.Line, Msg: fmt.Sprintf("allocator %s has no library line: add `library GLOB` naming the file that holds it", a.Name)}
	case len(a.Functions) == 0:
		return &ParseError{File: file, Line: a.Line, Msg: fmt.Sprintf("allocator %s names no function: add an alloc and a free line", a.Name)}
	}
	var alloc, free bool
	for _, f := range a.Functions {
		alloc = alloc || f.Role == RoleAlloc
		free = free || f.Role == RoleFree
	}
	if !alloc || !free {
		// Blocks that are never freed would all look leaked, and frees
		// without allocations are unknown frees: half a spec misleads.
		return &ParseError{File: file, Line: a.Line, Msg: fmt.Sprintf("allocator %s needs both an alloc and a free line", a.Name)}
	}
	return nil
}

// parseFunction parses the rest of an alloc or free line; msg says what is
// wrong.
func parseFunction(word, rest string) (fn Function, msg string) {
	fn.Role = RoleAlloc
	if word == "free" {
		fn.Role = RoleFree
	}
	for {
		field, after, _ := strings.Cut(rest, " ")
		key, val, ok := strings.Cut(field, "=")
		if !ok || (key != "ptr" && key != "size") {
			break
		}
		loc, err := parseLoc(val)
		if err != nil {
			return fn, fmt.Sprintf("%s=%s: %v", key, val, err)
		}
		dst := &fn.Ptr
		if key == "size" {
			dst = &fn.Size
		}
		if dst.Given() {
			return fn, fmt.Sprintf("%s is given twice: keep one", key)
		}
		*dst = loc
		rest = strings.TrimSpace(after)
	}
	fn.Pattern = rest
	switch {
	case !fn.Ptr.Given():
		return fn, fmt.Sprintf("%s needs ptr=: write `%s ptr=%s ... PATTERN`", word, word, map[Role]string{RoleAlloc: "ret", RoleFree: "arg2"}[fn.Role])
	case fn.Role == RoleAlloc && !fn.Size.Given():
		return fn, "alloc needs size=argN: the block's size is one of its arguments (arg1 is `this` in a method)"
	case fn.Size.Ret:
		return fn, "size=ret: a size is read from an argument; write size=argN"
	case fn.Role == RoleFree && fn.Ptr.Ret:
		return fn, "free ptr=ret: a free's pointer is one of its arguments; write ptr=argN"
	case fn.Pattern == "":
		return fn, fmt.Sprintf("%s names no function: end the line with the demangled name, e.g. `ns::Pool::Free(void*)`", word)
	}
	return fn, ""
}

var errLoc = errors.New("use ret or arg1..arg16")

func parseLoc(s string) (Loc, error) {
	if s == "ret" {
		return Loc{Ret: true}, nil
	}
	num, ok := strings.CutPrefix(s, "arg")
	if !ok {
		return Loc{}, errLoc
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return Loc{}, errLoc
	}
	if n < 1 {
		return Loc{}, fmt.Errorf("arguments count from 1 (`this` is arg1 of a method): use arg1..arg%d", MaxArg)
	}
	if n > MaxArg {
		return Loc{}, fmt.Errorf("at most arg%d", MaxArg)
	}
	return Loc{Arg: n}, nil
}

// Glob reports whether s matches pattern, where * matches any run of
// characters (none included) and ? any one; every other character,
// brackets and backslashes included, is literal, as C++ names need.
func Glob(pattern, s string) bool {
	// Iterative matching with one backtrack point: linear in practice.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]) && pattern[p] != '*':
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
