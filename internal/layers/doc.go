// Package layers holds no code: its test checks that the module's imports
// follow the package table of DESIGN.md ("Packages and their one job"), so
// an import that points up the layers fails the build's tests instead of
// waiting for a review. The table is written out in the test (allowed) and
// must change together with DESIGN.md.
package layers
