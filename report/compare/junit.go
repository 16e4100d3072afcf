package compare

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/jstemmer/go-junit-report/v2/junit"

	"github.com/vramprof/vramprof/report/units"
)

// JUnit names: the suite (and the document), and the class of every
// testcase.
const (
	junitName  = "vramprof check"
	junitClass = "vramprof.check"
	// junitTestClass is the class of the testcases of pytest tests.
	junitTestClass = "vramprof.check.pytest"
	// junitBasisProperty is the suite's property naming how pytest
	// tests were told apart.
	junitBasisProperty = "vramprof.pytest.basis"
)

// JUnit is the verdict as a JUnit document, one testcase per check: a
// memory check that failed is a <failure>, the command's own failure or
// too many lost events an <error>. The whole verdict text is the suite's
// system-out.
func (v *Verdict) JUnit() junit.Testsuites {
	var full bytes.Buffer
	v.WriteText(&full)
	// Checks take no measurable time: the suite's time is the sum of its
	// testcases', none, as go-junit-report writes it.
	suite := junit.Testsuite{Name: junitName, Time: "0.000", SystemOut: &junit.Output{Data: full.String()}}
	for _, c := range v.Checks {
		tc := junit.Testcase{Name: c.Name, Classname: junitClass}
		detail := c.Measured
		if !c.Tool {
			detail = fmt.Sprintf("%s; limit %s; %s", c.Measured, c.Limit, c.Margin)
		}
		if c.Test != nil {
			// One testcase per pytest test, named by its node id.
			tc.Classname = junitTestClass
			detail = fmt.Sprintf("%s; allocated %s in %s; limit %s; basis %s", c.Measured, units.BytesExact(c.Test.AllocatedBytes),
				plural(int(c.Test.Allocations), "allocation"), c.Limit, c.Test.Basis)
			if c.Margin != "" {
				detail += "; " + c.Margin
			}
		}
		switch {
		case !c.Pass && c.Unjudged:
			tc.Error = &junit.Result{Message: c.Message, Type: "no per-test figures", Data: detail}
		case !c.Pass && c.Whole:
			tc.Error = &junit.Result{Message: c.Message, Type: "incomplete recording", Data: detail}
		case !c.Pass && c.Lost:
			tc.Error = &junit.Result{Message: c.Message, Type: "lost events", Data: detail}
		case !c.Pass && c.Tool:
			tc.Error = &junit.Result{Message: c.Message, Type: "command", Data: detail}
		case !c.Pass && c.Name == "oom":
			// The forensics of each failure are the failure's body.
			var b bytes.Buffer
			writeOOMs(&b, v.Figures.OOMs)
			tc.Failure = &junit.Result{Message: c.Message, Type: "out of memory",
				Data: c.Measured + "\n" + strings.TrimLeft(b.String(), "\n")}
		case !c.Pass:
			tc.Failure = &junit.Result{Message: c.Message, Type: "memory regression", Data: detail}
		default:
			tc.SystemOut = &junit.Output{Data: detail}
		}
		suite.AddTestcase(tc)
	}
	if basis := v.testBasis(); basis != "" {
		// How the pytest tests' allocations were told apart (report/pytests):
		// "phases", "frames" or "mixed".
		suite.AddProperty(junitBasisProperty, basis)
	}
	doc := junit.Testsuites{Name: junitName}
	doc.AddSuite(suite)
	return doc
}

// WriteJUnit writes JUnit XML (see JUnit), with its XML declaration.
func (v *Verdict) WriteJUnit(w io.Writer) error {
	doc := v.JUnit()
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	if err := doc.WriteXML(&buf); err != nil {
		return fmt.Errorf("encode junit: %w", err)
	}
	_, err := w.Write(buf.Bytes())
	return err
}
