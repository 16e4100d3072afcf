package recorder

import (
	"io"

	"github.com/vramprof/vramprof/analysis"
	"github.com/vramprof/vramprof/profile"
	"github.com/vramprof/vramprof/report"
)

// Analyze replays a trace (or imports a PyTorch snapshot pickle) through
// the analysis. The live commands use it
// too, on the trace they just recorded: that is what makes `vramprof report`
// byte-identical to the live run. A trace cut short inside a record gives
// both a result and an error matching ErrTruncated.
//
// opts are the analysis options the user can set (--capacity); the same
// options give the same outputs.
func Analyze(tracePath string, opts analysis.Options) (*analysis.Result, error) {
	res, _, err := analyzePath(tracePath, opts, nil)
	return res, err
}

// WriteOutputs writes the profile and the reports of rep (its pytest
// tests with them) into out. Each file is written under a temporary name
// and renamed into place, so a failure never leaves a partial file that
// looks whole.
func WriteOutputs(out *Dir, rep *report.Report) error {
	res := rep.Result
	outputs := []struct {
		name  string
		write func(io.Writer) error
	}{
		{ProfileFile, func(w io.Writer) error { return profile.Write(w, res) }},
		{JSONFile, rep.WriteJSON},
		{MarkdownFile, rep.WriteMarkdown},
		{HTMLFile, rep.WriteHTML},
	}
	for _, o := range outputs {
		if err := out.WriteFile(o.name, o.write); err != nil {
			return err
		}
	}
	// What was live at each failed segment allocation of a traced caching
	// allocator (segments and blocks): oom-<n>.pb.gz, as report.json names
	// them.
	for i := range res.Pools {
		for j := range res.Pools[i].OOMs {
			o := &res.Pools[i].OOMs[j]
			view := res.AtOOM(o)
			if err := out.WriteFile(analysis.OOMProfileName(o), func(w io.Writer) error { return profile.Write(w, view) }); err != nil {
				return err
			}
		}
	}
	return nil
}
