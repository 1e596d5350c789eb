package ruledoc

import (
	"strings"
)

// maxDiffLines bounds the texts Diff compares line by line (its work is
// their product); longer texts get a whole replacement.
const maxDiffLines = 2000

// Diff returns a unified-style line diff of before and after, labelled
// with name: "--- a/name", "+++ b/name", then every line prefixed with
// " ", "-" or "+" (no hunks: rules are short). Equal texts give "".
func Diff(name, before, after string) string {
	if before == after {
		return ""
	}
	a, b := lines(before), lines(after)
	var out strings.Builder
	out.WriteString("--- a/" + name + "\n+++ b/" + name + "\n")
	if len(a) > maxDiffLines || len(b) > maxDiffLines {
		for _, l := range a {
			out.WriteString("-" + l + "\n")
		}
		for _, l := range b {
			out.WriteString("+" + l + "\n")
		}
		return out.String()
	}
	// lcs[i][j]: the longest common subsequence of a[i:] and b[j:].
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
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			out.WriteString(" " + a[i] + "\n")
			i++
			j++
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			out.WriteString("-" + a[i] + "\n")
			i++
		default:
			out.WriteString("+" + b[j] + "\n")
			j++
		}
	}
	return out.String()
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
