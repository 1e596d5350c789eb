package main

// The README's code blocks and the markers that say how each is tested.
//
// Every fenced block in README.md is preceded (on the line just above its
// opening fence, or with only blank lines between) by a marker:
//
//	<!-- readme-test: ACTION [ARG] [-- REASON] -->
//
// ACTION is one of
//
//	skip -- REASON    not run and not checked: an output sample, a diagram
//	syntax -- REASON  only its syntax is checked (bash -n, YAML, Python's
//	                  parser, ...) because running it here is not possible;
//	                  REASON says why, and what tests it instead if anything
//	rules FILE        a rules file: parsed with config.ParseRules and
//	                  written as FILE for the blocks after it
//	routes FILE       a proxy routes file: parsed with config.ParseProxyRoutes,
//	                  checked against rules.yaml, written as FILE
//	file FILE         written as FILE, not checked by itself (a file with
//	                  mistakes that a later block lints)
//	build -- REASON   a Go program: compiled as written, not run
//	run NAME          run by the check NAME in readme_test.go (a Go program
//	                  compiled and run, shell commands executed, Python run)
//
// Files (rules, routes, file) are written to one scratch directory before
// any block runs, so a block may use a file the README shows later; their
// names are unique.
//
// A block without a marker, a marker without a block, an unknown action, a
// skip or syntax without a reason, and an indented code block (write a
// fenced one) are errors, so every new block is tested or visibly not.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// readmeBlock is one fenced code block of the README.
type readmeBlock struct {
	Line   int    // line of the opening fence, 1-based
	Lang   string // the fence's info string: sh, go, yaml, ...
	Body   string // the lines between the fences, newline-terminated
	Action string // the marker's action
	Arg    string // the marker's argument (a file or check name), if any
	Reason string // the marker's reason, if any
}

func (b readmeBlock) String() string {
	return fmt.Sprintf("README.md:%d (```%s, %s %s)", b.Line, b.Lang, b.Action, b.Arg)
}

var (
	readmeMarkerRE = regexp.MustCompile(`^<!-- readme-test: (.*?) -->$`)
	readmeFenceRE  = regexp.MustCompile("^(```+|~~~+)[ \t]*([^ \t`]*)")
	readmeListRE   = regexp.MustCompile(`^\s*([-*+]|[0-9]+[.)])\s`)
)

// readmeActions are the markers' actions and whether each needs an
// argument and a reason.
var readmeActions = map[string]struct{ arg, reason bool }{
	"skip":   {reason: true},
	"syntax": {reason: true},
	"rules":  {arg: true},
	"routes": {arg: true},
	"file":   {arg: true},
	"build":  {reason: true},
	"run":    {arg: true},
}

// parseReadmeBlocks returns the fenced blocks of a Markdown text with their
// markers, or every problem found: an unmarked block, a bad marker, a
// marker that no block follows, an unclosed fence, an indented code block.
func parseReadmeBlocks(text string) ([]readmeBlock, []error) {
	var (
		blocks    []readmeBlock
		errs      []error
		pending   *readmeBlock // a marker waiting for its block
		open      *readmeBlock // the block being read
		fence     string
		body      strings.Builder
		prevBlank = true
		inList    bool
	)
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		n := i + 1
		if open != nil {
			if strings.HasPrefix(strings.TrimLeft(line, " "), fence) && strings.Trim(strings.TrimSpace(line), fence[:1]) == "" {
				open.Body = body.String()
				blocks = append(blocks, *open)
				open, prevBlank = nil, false
				continue
			}
			body.WriteString(line + "\n")
			continue
		}
		trimmed := strings.TrimSpace(line)
		if m := readmeFenceRE.FindStringSubmatch(strings.TrimLeft(line, " ")); m != nil {
			b := readmeBlock{Line: n, Lang: m[2]}
			if pending == nil {
				errs = append(errs, fmt.Errorf("README.md:%d: a ```%s block without a <!-- readme-test: ... --> marker above it", n, m[2]))
			} else {
				b.Action, b.Arg, b.Reason = pending.Action, pending.Arg, pending.Reason
			}
			pending, open, fence = nil, &b, m[1]
			body.Reset()
			continue
		}
		if m := readmeMarkerRE.FindStringSubmatch(trimmed); m != nil {
			if pending != nil {
				errs = append(errs, fmt.Errorf("README.md:%d: a marker with no block after it", pending.Line))
			}
			b, err := parseReadmeMarker(m[1])
			if err != nil {
				errs = append(errs, fmt.Errorf("README.md:%d: %w", n, err))
			}
			b.Line = n
			pending = &b
			continue
		}
		if strings.HasPrefix(trimmed, "<!--") && strings.Contains(trimmed, "readme-test") {
			errs = append(errs, fmt.Errorf("README.md:%d: a malformed marker (want <!-- readme-test: ACTION [ARG] [-- REASON] --> on a line of its own)", n))
		}
		if trimmed == "" {
			prevBlank = true
			continue
		}
		if pending != nil {
			errs = append(errs, fmt.Errorf("README.md:%d: a marker with no block after it", pending.Line))
			pending = nil
		}
		indent := len(line) - len(strings.TrimLeft(line, " \t"))
		switch {
		case readmeListRE.MatchString(line):
			inList = true
		case indent == 0:
			inList = false
		}
		// An indented code block: four spaces past the text it would sit
		// in, after a blank line (it cannot interrupt a paragraph).
		if prevBlank && ((!inList && indent >= 4) || (inList && indent >= 6)) && !readmeListRE.MatchString(line) {
			errs = append(errs, fmt.Errorf("README.md:%d: an indented code block: fence it (```) and mark it", n))
		}
		prevBlank = false
	}
	if open != nil {
		errs = append(errs, fmt.Errorf("README.md:%d: a ``` block that is never closed", open.Line))
	}
	if pending != nil {
		errs = append(errs, fmt.Errorf("README.md:%d: a marker with no block after it", pending.Line))
	}
	return blocks, errs
}

// parseReadmeMarker reads "ACTION [ARG] [-- REASON]".
func parseReadmeMarker(s string) (readmeBlock, error) {
	var b readmeBlock
	head, reason, _ := strings.Cut(s, "--")
	b.Reason = strings.TrimSpace(reason)
	f := strings.Fields(head)
	if len(f) == 0 {
		return b, fmt.Errorf("an empty readme-test marker")
	}
	b.Action = f[0]
	want, ok := readmeActions[b.Action]
	if !ok {
		return b, fmt.Errorf("readme-test action %q: want skip, syntax, rules, routes, file, build or run", b.Action)
	}
	switch {
	case len(f) > 2:
		return b, fmt.Errorf("readme-test %s: more than one argument (%q); a reason goes after --", b.Action, f[1:])
	case want.arg && len(f) != 2:
		return b, fmt.Errorf("readme-test %s needs an argument", b.Action)
	case !want.arg && len(f) != 1:
		return b, fmt.Errorf("readme-test %s takes no argument (%q); a reason goes after --", b.Action, f[1])
	case want.reason && b.Reason == "":
		return b, fmt.Errorf("readme-test %s needs a reason after --", b.Action)
	}
	if want.arg {
		b.Arg = f[1]
	}
	return b, nil
}

// The parser finds every block and refuses what would leave one untested.
func TestReadmeBlockParser(t *testing.T) {
	for _, tc := range []struct {
		name, md string
		blocks   int
		err      string // a problem the parser must report ("" for none)
	}{
		{"marked", "text\n\n<!-- readme-test: run x -->\n```sh\necho\n```\n", 1, ""},
		{"marker then blank line", "<!-- readme-test: skip -- sample -->\n\n```text\nout\n```\n", 1, ""},
		{"unmarked", "text\n\n```go\npackage main\n```\n", 1, "without a <!-- readme-test"},
		{"unknown action", "<!-- readme-test: maybe -->\n```sh\nx\n```\n", 1, `action "maybe"`},
		{"skip without a reason", "<!-- readme-test: skip -->\n```text\nx\n```\n", 1, "needs a reason"},
		{"run without a name", "<!-- readme-test: run -->\n```sh\nx\n```\n", 1, "needs an argument"},
		{"build without a reason", "<!-- readme-test: build -->\n```go\nx\n```\n", 1, "needs a reason"},
		{"marker before text", "<!-- readme-test: run x -->\ntext\n```sh\nx\n```\n", 1, "no block after it"},
		{"marker at the end", "<!-- readme-test: run x -->\n", 0, "no block after it"},
		{"malformed marker", "<!--readme-test: run x-->\n```sh\nx\n```\n", 1, "malformed marker"},
		{"unclosed fence", "<!-- readme-test: run x -->\n```sh\nx\n", 0, "never closed"},
		{"indented block", "text\n\n    go run ./cmd/sluiced\n", 0, "indented code block"},
		{"list continuation is no block", "- item\n\n  more of the item\n  - nested\n    text\n", 0, ""},
		{"indented block in a list", "- item\n\n      sluice check a b\n", 0, "indented code block"},
		{"longer fence holds a shorter one", "<!-- readme-test: skip -- nested -->\n````md\n```sh\nx\n```\n````\n", 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blocks, errs := parseReadmeBlocks(tc.md)
			if len(blocks) != tc.blocks {
				t.Errorf("%d blocks, want %d", len(blocks), tc.blocks)
			}
			var all []string
			for _, err := range errs {
				all = append(all, err.Error())
			}
			got := strings.Join(all, "\n")
			if (tc.err == "") != (got == "") || !strings.Contains(got, tc.err) {
				t.Errorf("problems %q, want one containing %q", got, tc.err)
			}
		})
	}
}
