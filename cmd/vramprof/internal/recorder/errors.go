package recorder

import "errors"

var (
	// ErrOutputDir: the output directory cannot be created or written.
	ErrOutputDir = errors.New("cannot write output directory")
	// ErrOutputExists: the output directory already holds a recording's
	// files, which would be overwritten (Force replaces them).
	ErrOutputExists = errors.New("output directory holds an earlier recording")
	// ErrOutputLink: the output directory or a file in it is a symbolic
	// link, which vramprof never writes through (run as root, a link
	// planted in a shared directory would aim its writes anywhere).
	ErrOutputLink = errors.New("output path is a symbolic link")
	// ErrInput: the input of Analyze, Replay or Report cannot be read.
	ErrInput = errors.New("cannot read input")
	// ErrTruncated: the trace ends inside a record, or without its End
	// record (the recorder was killed). What came before is valid and is
	// analysed; the outputs say the run was cut short.
	ErrTruncated = errors.New("trace cut short")
	// ErrSegments: a flight recorder's segments do not follow each other
	// (one is missing, cut short, repeated or of another recording): the
	// figures would be wrong, so none are given.
	ErrSegments = errors.New("trace segments do not follow each other")
	// ErrUsage: the request contradicts its input (Report's --pid on a
	// PyTorch snapshot, a PID without device events); the CLI shows it as
	// a usage error.
	ErrUsage = errors.New("usage")
)

// usageError marks err as ErrUsage without changing its text.
func usageError(err error) error { return &usage{err} }

type usage struct{ err error }

func (u *usage) Error() string   { return u.err.Error() }
func (u *usage) Unwrap() []error { return []error{u.err, ErrUsage} }
