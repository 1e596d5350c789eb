// Package ruledoc turns the rules service's stored rules into the rules
// documents it serves and hands out, and judges changes to them: every
// rule and document is validated with the daemon's own parser
// (config.ParseRules), whose errors are mapped back to the rule and field
// they name; a change is checked for removing or loosening limits by more
// than a factor; and a line diff shows what changed.
//
// It holds no state and does no I/O.
package ruledoc
