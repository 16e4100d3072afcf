package compare

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// Outputs say where Publish writes a verdict besides its text. The errors
// Publish returns name the flag or variable each file came from.
type Outputs struct {
	// Annotations adds GitHub Actions workflow commands after the text
	// (GITHUB_ACTIONS=true).
	Annotations bool
	// JUnit, when not "", receives a JUnit XML report (--junit).
	JUnit string
	// StepSummary, when not "", has the Markdown summary appended
	// (GITHUB_STEP_SUMMARY).
	StepSummary string
	// Baseline, when not "", receives the recording's baseline, written by
	// Tool (--write-baseline), unless the command failed or the verdict is
	// unknown.
	Baseline string
	Tool     string
	// WriteFile writes the file at path with what write writes, whole or
	// not at all (cmd/vramprof/internal/recorder's WriteFileAtomic).
	WriteFile func(path string, write func(io.Writer) error) error
}

// Publish writes the verdict's text to stdout, in one write, then the files
// o asks for, and returns the verdict's Outcome.
func (v *Verdict) Publish(stdout io.Writer, o Outputs) (regression bool, err error) {
	var text bytes.Buffer
	v.WriteText(&text)
	if o.Annotations {
		v.WriteAnnotations(&text)
	}
	if _, err := stdout.Write(text.Bytes()); err != nil {
		return false, fmt.Errorf("write verdict: %w", err)
	}
	if o.JUnit != "" {
		if err := o.WriteFile(o.JUnit, v.WriteJUnit); err != nil {
			return false, fmt.Errorf("--junit: %w", err)
		}
	}
	if o.StepSummary != "" {
		if err := appendFile(o.StepSummary, v.WriteMarkdown); err != nil {
			return false, fmt.Errorf("GITHUB_STEP_SUMMARY: %w", err)
		}
	}
	// A failed command's recording is no baseline for the next run, nor
	// one whose figures lost events may have skewed.
	if _, cmdFailed := v.Failed(); o.Baseline != "" && !cmdFailed && !v.Unknown() {
		write := func(w io.Writer) error { return WriteBaseline(w, v.Figures, o.Tool) }
		if err := o.WriteFile(o.Baseline, write); err != nil {
			return false, fmt.Errorf("--write-baseline: %w", err)
		}
	}
	return v.Outcome()
}

// appendFile appends what write writes to path, creating it if needed.
func appendFile(path string, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
