package rulesapi

import (
	"strconv"
	"strings"
)

// Header names the API uses beyond the usual ones.
const (
	// HeaderVersion carries the served document's version, on ServedPath.
	HeaderVersion = "Sluice-Rules-Version"
	// HeaderPrefer asks for a long-poll: "Prefer: wait=30" holds a
	// conditional GET of ServedPath up to 30 s for a newer version.
	HeaderPrefer = "Prefer"
)

// VersionETag is the ETag of a version: a quoted "v<N>".
func VersionETag(version int64) string {
	return `"v` + strconv.FormatInt(version, 10) + `"`
}

// ParseVersionETag returns the version a VersionETag names; a weak
// validator (W/"v3") is accepted. ok is false for anything else.
func ParseVersionETag(etag string) (version int64, ok bool) {
	s := strings.TrimPrefix(strings.TrimSpace(etag), "W/")
	s, found := strings.CutPrefix(s, `"v`)
	if !found {
		return 0, false
	}
	s, found = strings.CutSuffix(s, `"`)
	if !found {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// ETagMatches reports whether an If-Match or If-None-Match header value
// (a list of ETags, or "*") names etag. exists says whether the resource
// exists ("*" matches any existing resource).
func ETagMatches(header, etag string, exists bool) bool {
	for part := range strings.SplitSeq(header, ",") {
		part = strings.TrimSpace(part)
		switch {
		case part == "":
		case part == "*":
			if exists {
				return true
			}
		case exists && strings.TrimPrefix(part, "W/") == strings.TrimPrefix(etag, "W/"):
			return true
		}
	}
	return false
}

// ParsePreferWait returns the wait of a "Prefer: wait=N" header (N in
// seconds), capped at MaxWait; 0 when there is none.
func ParsePreferWait(header string) (secs int64) {
	for pref := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pref), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "wait") {
			continue
		}
		n, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(v), `"`), 10, 64)
		if err != nil || n <= 0 {
			return 0
		}
		return min(n, int64(MaxWait.Seconds()))
	}
	return 0
}
