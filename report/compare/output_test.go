package compare

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/report/units"
)

// junitDoc is the part of a JUnit file CI systems read.
type junitDoc struct {
	XMLName  xml.Name `xml:"testsuites"`
	Name     string   `xml:"name,attr"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Errors   int      `xml:"errors,attr"`
	Suites   []struct {
		Name      string      `xml:"name,attr"`
		Tests     int         `xml:"tests,attr"`
		Failures  int         `xml:"failures,attr"`
		Errors    int         `xml:"errors,attr"`
		Cases     []junitCase `xml:"testcase"`
		SystemOut string      `xml:"system-out"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name      string       `xml:"name,attr"`
	Classname string       `xml:"classname,attr"`
	Failure   *junitResult `xml:"failure"`
	Error     *junitResult `xml:"error"`
	SystemOut *string      `xml:"system-out"`
}

type junitResult struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

func mustJUnit(t *testing.T, v *Verdict) (*junitDoc, string) {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, v.WriteJUnit(&buf))
	var doc junitDoc
	require.NoError(t, xml.Unmarshal(buf.Bytes(), &doc), buf.String())
	require.Len(t, doc.Suites, 1)
	return &doc, buf.String()
}

// TestJUnit: one testcase per check; a memory check that failed is a
// failure, the command's own failure an error; the whole verdict is the
// suite's output.
func TestJUnit(t *testing.T) {
	bx := units.BytesExact
	v := Judge(mustLoad(t, "new"), nil, Limits{MaxPeak: u64(newPeak - 1), MaxLeak: u64(newLive)}, intp(0))
	v.Recording = "recording: new"
	doc, raw := mustJUnit(t, v)
	assert.True(t, strings.HasPrefix(raw, `<?xml version="1.0" encoding="UTF-8"?>`+"\n<testsuites"), raw)
	assert.Equal(t, "vramprof check", doc.Name)
	assert.Equal(t, [3]int{3, 1, 0}, [3]int{doc.Tests, doc.Failures, doc.Errors})
	s := doc.Suites[0]
	assert.Equal(t, "vramprof check", s.Name)
	assert.Equal(t, [3]int{3, 1, 0}, [3]int{s.Tests, s.Failures, s.Errors})
	assert.Equal(t, textOf(v), s.SystemOut)
	require.Len(t, s.Cases, 3)

	cmd, peak, leak := s.Cases[0], s.Cases[1], s.Cases[2]
	assert.Equal(t, "command", cmd.Name)
	assert.Nil(t, cmd.Failure)
	assert.Nil(t, cmd.Error)
	require.NotNil(t, cmd.SystemOut)
	assert.Equal(t, "exit code 0", *cmd.SystemOut)

	assert.Equal(t, "max-peak", peak.Name)
	assert.Equal(t, "vramprof.check", peak.Classname)
	require.NotNil(t, peak.Failure)
	assert.Equal(t, "memory regression", peak.Failure.Type)
	assert.Equal(t, fmt.Sprintf("peak %s exceeds the limit %s by 1 byte (1 B)", bx(newPeak), bx(newPeak-1)), peak.Failure.Message)
	assert.Equal(t, fmt.Sprintf("peak %s; limit %s; over by 1 byte (1 B)", bx(newPeak), bx(newPeak-1)), peak.Failure.Text)

	assert.Equal(t, "max-leak", leak.Name)
	require.NotNil(t, leak.SystemOut)
	assert.Equal(t, fmt.Sprintf("live at end %s; limit %s; margin 0 bytes (0 B)", bx(newLive), bx(newLive)), *leak.SystemOut)

	_, again := mustJUnit(t, v)
	assert.Equal(t, raw, again, "the same verdict, the same file")
}

// TestJUnitErrors: too many lost events and the command's own failure are
// errors, not failures.
func TestJUnitErrors(t *testing.T) {
	v := Judge(mustLoad(t, "lossy"), nil, Limits{MaxPeak: u64(1000)}, intp(2))
	doc, _ := mustJUnit(t, v)
	assert.Equal(t, [3]int{3, 0, 2}, [3]int{doc.Tests, doc.Failures, doc.Errors})
	cases := doc.Suites[0].Cases
	require.Len(t, cases, 3)
	require.NotNil(t, cases[0].Error)
	assert.Equal(t, "command", cases[0].Name)
	assert.Equal(t, "command", cases[0].Error.Type)
	assert.Equal(t, "command failed with exit code 2 (its own failure, not a memory regression)", cases[0].Error.Message)
	require.NotNil(t, cases[1].Error)
	assert.Equal(t, "lost-events", cases[1].Name)
	assert.Equal(t, "lost events", cases[1].Error.Type)
	assert.True(t, strings.HasPrefix(cases[1].Error.Message, "3 of 1000 events lost (0.30%), more than allowed (none (no --allow-lost))"), cases[1].Error.Message)
	assert.Nil(t, cases[2].Error)
	assert.Nil(t, cases[2].Failure)
}

func TestAnnotations(t *testing.T) {
	annotations := func(v *Verdict) string {
		var b bytes.Buffer
		v.WriteAnnotations(&b)
		return b.String()
	}
	// new grew +10.00% over base: its '%' and ':' are escaped.
	v := Judge(mustLoad(t, "new"), mustLoad(t, "base"), Limits{MaxIncrease: rat(t, "5"), MaxIncreaseText: "5"}, nil)
	out := annotations(v)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 2, out)
	grew := fmt.Sprintf("%+.2f%%25", pct(basePeak, newPeak))
	assert.True(t, strings.HasPrefix(lines[0], "::error title=vramprof check%3A max-increase::peak "+units.BytesExact(newPeak)+" grew "+grew+" over the baseline's "), lines[0])
	assert.Contains(t, lines[0], "at most +5%25 (")
	assert.Equal(t, "::warning title=vramprof check%3A late events::2 events late (a free that took longer than the reorder window): they may be misordered against calls on the same address", lines[1])

	// Lost events within --allow-lost: a warning; beyond it: an error.
	lossy := mustLoad(t, "lossy")
	ok := Judge(lossy, nil, Limits{AllowLost: rat(t, "1"), AllowLostText: "1"}, nil)
	assert.Equal(t, "::warning title=vramprof check%3A lost events::3 events lost (ring buffer full): the figures may be wrong either way (a missed free reads high, a missed allocation low)\n", annotations(ok))
	unknown := annotations(Judge(lossy, nil, Limits{}, nil))
	assert.True(t, strings.HasPrefix(unknown, "::error title=vramprof check%3A lost-events::3 of 1000 events lost (0.30%25), more than allowed"), unknown)
	assert.NotContains(t, unknown, "::warning")

	assert.Equal(t, "a%3Ab%2Cc%25%0Ad%0D", ghProperty("a:b,c%\nd\r"))
	assert.Equal(t, "a:b,c%25%0Ad", ghData("a:b,c%\nd"))
}

func TestMarkdown(t *testing.T) {
	bx := units.BytesExact
	s := mustLoad(t, "new")
	s.Command = []string{"run", "`x`"}
	v := Judge(s, nil, Limits{MaxPeak: u64(newPeak - 1)}, intp(0))
	var b bytes.Buffer
	require.NoError(t, v.WriteMarkdown(&b))
	md := b.String()
	want := "## vramprof check: FAIL: memory regression (1 of 1 check failed)\n\n" +
		// The command's backticks would end the code span.
		fmt.Sprintf("Command: `run ''x''`. Peak %s, live at end %s.\n\n", bx(newPeak), bx(newLive)) +
		"> **Warning:** 2 events late (a free that took longer than the reorder window): they may be misordered against calls on the same address.\n\n" +
		"| check | result | measured | limit | margin |\n| --- | --- | --- | --- | --- |\n" +
		"| command | **PASS** | exit code 0 | exit code 0 |  |\n" +
		fmt.Sprintf("| max-peak | **FAIL** | peak %s | %s | over by 1 byte (1 B) |\n", bx(newPeak), bx(newPeak-1)) +
		"\n<details><summary>Stacks</summary>\n\n```\ntop stacks at the peak:\n  1. "
	assert.True(t, strings.HasPrefix(md, want), md)
	assert.True(t, strings.HasSuffix(md, "```\n\n</details>\n\n"), md)
	assert.Equal(t, `a \| b c`, mdCell("a | b\nc"))

	// Nothing failed: no stacks section.
	b.Reset()
	require.NoError(t, Judge(s, nil, Limits{MaxPeak: u64(newPeak)}, nil).WriteMarkdown(&b))
	assert.NotContains(t, b.String(), "<details>")
	assert.True(t, strings.HasPrefix(b.String(), "## vramprof check: PASS (1 check)\n\n"))
}
