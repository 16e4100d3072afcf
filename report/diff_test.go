package report

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines shown around each change.
const diffContext = 3

// diff returns a unified diff from want to got, line by line, or "" when they
// are equal. It is a plain LCS: quadratic, fine for golden files.
func diff(want, got string) string {
	if want == got {
		return ""
	}
	a := lines(want)
	b := lines(got)
	// lcs[i][j] is the length of the longest common subsequence of a[i:], b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte // ' ', '-', '+'
		text string
		ai   int // line in a (0-based) at this op
		bi   int
	}
	var ops []op
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, op{' ', a[i], i, j})
			i++
			j++
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', a[i], i, j})
			i++
		default:
			ops = append(ops, op{'+', b[j], i, j})
			j++
		}
	}
	var out strings.Builder
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		// A hunk: from diffContext lines before this change to diffContext
		// lines after the last change that is closer than 2*diffContext.
		start := max(0, k-diffContext)
		end := k
		for m := k; m < len(ops); m++ {
			if ops[m].kind != ' ' {
				end = m
			} else if m-end > 2*diffContext {
				break
			}
		}
		end = min(len(ops), end+diffContext+1)
		var na, nb int
		for _, o := range ops[start:end] {
			if o.kind != '+' {
				na++
			}
			if o.kind != '-' {
				nb++
			}
		}
		fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n", ops[start].ai+1, na, ops[start].bi+1, nb)
		for _, o := range ops[start:end] {
			out.WriteByte(o.kind)
			out.WriteString(strings.TrimSuffix(o.text, "\n"))
			out.WriteByte('\n')
		}
		k = end
	}
	return out.String()
}

// lines splits text after each newline, without the empty piece a final
// newline leaves.
func lines(s string) []string {
	l := strings.SplitAfter(s, "\n")
	if len(l) > 0 && l[len(l)-1] == "" {
		l = l[:len(l)-1]
	}
	return l
}
