package compare

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/vramprof/vramprof/report/units"
)

// WriteAnnotations writes GitHub Actions workflow commands: an error per
// failed check, a warning for lost events (when they leave a verdict) and
// for late events. A failed check whose evidence points to source lines
// (Check.Sites) gets an error at each, with the file (relative to
// v.SourceRoot, see sourceFiles) and line, so that GitHub shows it inline
// in a pull request; a site whose file is not under the root gets the
// error without them.
func (v *Verdict) WriteAnnotations(w io.Writer) {
	src := &sourceFiles{root: v.SourceRoot}
	for _, c := range v.Checks {
		if c.Pass {
			continue
		}
		title := ghProperty("vramprof check: " + c.Name)
		if len(c.Sites) == 0 {
			fmt.Fprintf(w, "::error title=%s::%s\n", title, ghData(c.Message))
			continue
		}
		for _, a := range c.Sites {
			loc := ""
			if file, line, ok := siteLocation(a.Site); ok {
				if rel := src.relative(file); rel != "" {
					loc = fmt.Sprintf("file=%s,line=%d,", ghProperty(rel), line)
				}
			}
			fmt.Fprintf(w, "::error %stitle=%s::%s\n", loc, title, ghData(a.Message))
		}
	}
	if v.Figures.Lost > 0 && !v.Unknown() {
		fmt.Fprintf(w, "::warning title=%s::%s\n", ghProperty("vramprof check: lost events"),
			ghData(fmt.Sprintf("%d events lost (%s): %s", v.Figures.Lost, v.Figures.lostCause(), lostText)))
	}
	if v.Figures.Late > 0 {
		fmt.Fprintf(w, "::warning title=%s::%s\n", ghProperty("vramprof check: late events"), ghData(lateWarning(v.Figures.Late)))
	}
}

// ghData escapes a workflow command's message.
func ghData(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(s)
}

// ghProperty escapes a workflow command's property value.
func ghProperty(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A", ":", "%3A", ",", "%2C").Replace(s)
}

// mdCell escapes a Markdown table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// WriteMarkdown writes the verdict as a GitHub step summary: the header, a
// table of the checks, and the evidence stacks folded away.
func (v *Verdict) WriteMarkdown(w io.Writer) error {
	var out bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&out, format, args...) }
	s := v.Figures
	p("## vramprof check: %s\n\n", mdCell(v.Header()))
	if len(s.Command) > 0 {
		p("Command: `%s`. ", strings.ReplaceAll(CommandText(s.Command), "`", "'"))
	}
	if s.NoFigures {
		p("No figures: the recording could not be read into figures.\n\n")
	} else {
		p("Peak %s, live at end %s.\n\n", units.BytesExact(s.Peak), units.BytesExact(s.LiveEnd))
	}
	if s.Lost > 0 {
		p("> **Warning:** %d events lost (%s): %s.\n\n", s.Lost, s.lostCause(), lostText)
	}
	if s.Late > 0 {
		p("> **Warning:** %s.\n\n", lateWarning(s.Late))
	}
	for _, r := range s.Incomplete {
		p("> **Warning:** incomplete recording: %s.\n\n", mdCell(r))
	}
	p("| check | result | measured | limit | margin |\n| --- | --- | --- | --- | --- |\n")
	for _, c := range v.Checks {
		result := passText(c.Pass)
		switch {
		case c.Lost || c.Whole || c.Unjudged:
			result = lostPassText(c.Pass)
		case c.Unlimited:
			result = "INFO"
		}
		p("| %s | **%s** | %s | %s | %s |\n", c.Name, result, mdCell(c.Measured), mdCell(c.Limit), mdCell(c.Margin))
	}
	if v.ShowPeak || v.ShowLeak || v.oomFailed() {
		p("\n<details><summary>Stacks</summary>\n\n```\n")
		var buf bytes.Buffer
		v.writeStacks(&buf)
		p("%s```\n\n</details>\n", strings.ReplaceAll(strings.TrimLeft(buf.String(), "\n"), "```", "'''"))
	}
	p("\n")
	_, err := w.Write(out.Bytes())
	return err
}
