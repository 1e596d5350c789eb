package main

import (
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// table lines up tab-separated columns; Flush it when done.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// shortHash is the prefix of a rules hash that tables show.
func shortHash(h string) string {
	if h == "" {
		return "-"
	}
	if len(h) > 8 {
		return h[:8]
	}
	return h
}

// periodUnits are the units shortPeriod tries, largest first; "d" is what the
// rules file itself accepts for days.
var periodUnits = []struct {
	d    time.Duration
	name string
}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}}

// shortPeriod turns the daemon's period ("1h0m0s") into the rules file's
// spelling ("1h"); anything it cannot parse is shown as is.
func shortPeriod(s string) string {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return s
	}
	for _, u := range periodUnits {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}

// rate is a limit as the rules file writes it: COUNT/PERIOD.
func rate(limit int64, period string) string {
	return strconv.FormatInt(limit, 10) + "/" + shortPeriod(period)
}

// num shows a token count with at most two decimals and no trailing zeros.
func num(f float64) string {
	f = math.Round(f*100) / 100
	if f == 0 {
		f = 0 // no "-0"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// barWidth is the number of cells in watch's balance bar.
const barWidth = 20

// bar draws balance against burst: full cells for tokens left, dots for
// tokens spent; a bucket in debt is all dots.
func bar(balance float64, burst int64) string {
	full := 0
	if burst > 0 {
		full = int(math.Round(max(0, min(1, balance/float64(burst))) * barWidth))
	}
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", barWidth-full) + "]"
}

// orDash shows an empty cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
