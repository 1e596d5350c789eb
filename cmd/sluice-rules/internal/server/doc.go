// Package server is the rules service's HTTP side: the JSON REST API under
// /v1 (see internal/rulesapi for the wire types and the conventions), the
// served rules document at /rules.yaml with ETags, 304s and long-poll,
// health endpoints and Prometheus metrics.
//
// Every change runs in one store transaction that reads the team's rules,
// applies the change, validates the team's rules and then the whole served
// document with the daemon's parser, checks If-Match and loosening, and
// writes the rules, the new served version, the team's history and the
// audit log together: a document that fails validation is never stored,
// so it is never served. After the commit the new version is published to
// the in-memory copy that /rules.yaml serves, waking long-polls.
package server
