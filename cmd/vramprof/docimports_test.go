package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// importsLine is how every package's doc.go states what the package
// imports: "Imports, besides the standard library: A, B and C." (or
// "nothing"), vramprof's packages by their path in the module, others by
// their module path, "cgo" for import "C".
const importsLine = "// Imports, besides the standard library:"

// TestDocImports holds each doc.go's imports line to the package's real
// imports (go list), so that a package's doc never claims a narrower (or
// wider) dependency set than it has: every package with a doc.go has the
// line, and it names exactly what the package imports.
func TestDocImports(t *testing.T) {
	root := moduleRoot(t)
	module := goList(t, root, "list", "-m")[0]
	// Each package's module (empty for the standard library).
	modules := map[string]string{}
	for _, l := range goList(t, root, "list", "-deps", "-f", "{{.ImportPath}}|{{.Standard}}|{{with .Module}}{{.Path}}{{end}}", "./...") {
		f := strings.Split(l, "|")
		require.Len(t, f, 3, "go list line %q", l)
		if f[1] != "true" {
			modules[f[0]] = f[2]
		}
	}
	checked := 0
	for _, l := range goList(t, root, "list", "-f", "{{.ImportPath}}|{{.Dir}}|{{join .Imports \" \"}}", "./...") {
		f := strings.SplitN(l, "|", 3)
		require.Len(t, f, 3, "go list line %q", l)
		pkg, dir := f[0], f[1]
		doc := filepath.Join(dir, "doc.go")
		if _, err := os.Stat(doc); err != nil {
			continue
		}
		want := map[string]bool{}
		for _, imp := range strings.Fields(f[2]) {
			switch m, ok := modules[imp]; {
			case imp == "C":
				want["cgo"] = true
			case !ok: // the standard library
			case m == module:
				want[strings.TrimPrefix(imp, module+"/")] = true
			default:
				want[m] = true
			}
		}
		claimed, ok := docImports(t, doc)
		if !assert.True(t, ok, "%s: no %q line in its package comment", doc, importsLine) {
			continue
		}
		assert.Equal(t, sorted(want), sorted(claimed), "%s: the imports its doc.go states (%s)", pkg, doc)
		checked++
	}
	assert.GreaterOrEqual(t, checked, 20, "packages with a doc.go checked")
	t.Logf("%d packages' doc.go imports lines checked", checked)
}

// docImports reads the imports line of doc (it may wrap: up to the
// sentence's period).
func docImports(t *testing.T, doc string) (map[string]bool, bool) {
	t.Helper()
	f, err := os.Open(doc)
	require.NoError(t, err)
	defer f.Close()
	var text string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, importsLine):
			in, text = true, strings.TrimPrefix(line, importsLine)
		case in && strings.HasPrefix(line, "//"):
			text += " " + strings.TrimSpace(strings.TrimPrefix(line, "//"))
		default:
			in = false
		}
		if in && strings.HasSuffix(text, ".") {
			break
		}
	}
	require.NoError(t, sc.Err())
	if text == "" {
		return nil, false
	}
	text = strings.TrimSuffix(strings.TrimSpace(text), ".")
	out := map[string]bool{}
	if text == "nothing" {
		return out, true
	}
	for _, item := range regexp.MustCompile(`, | and `).Split(text, -1) {
		out[strings.TrimSpace(item)] = true
	}
	return out, true
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// moduleRoot is the directory holding go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}

// goList runs the go command in dir and returns its output's lines.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var stderr string
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "go %s: %s", strings.Join(args, " "), stderr)
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
