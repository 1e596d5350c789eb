// Package rulesapi is the wire format of the sluice-rules service's JSON
// REST API, and a small client for it that needs only the standard library.
//
// The service (cmd/sluice-rules) stores every team's rate-limit rules in a
// database and serves them all to daemons as one rules document, the
// daemon's own YAML format, at ServedPath. Teams change their own rules
// through the API under /v1 with a bearer token; an admin token manages
// teams and tokens. This package holds what both sides of that API share:
// the JSON request and response types, the error shape, the header names
// and ETag helpers for optimistic concurrency, and Client, which the
// `sluice rules` commands use.
//
// # Conventions
//
//   - Every request under /v1 carries "Authorization: Bearer <token>".
//     401 means no or an unknown token; 403 a token of another team, or a
//     team token on an admin endpoint.
//   - Every error answer is JSON: an ErrorBody whose Error names a Code
//     callers branch on (the Code* constants), a message for people and,
//     for invalid rules, one FieldProblem per problem naming the rule and
//     the field.
//   - A team's rules, and each rule, carry an ETag ("v<N>", N the global
//     version that last changed them). A change sent with If-Match that no
//     longer matches is refused with 412 (CodeStale); If-None-Match: *
//     on a rule's PUT creates it only if it does not exist.
//   - A change that removes limits, or loosens one by more than the
//     service's factor, is refused with 409 (CodeConfirmRequired) unless
//     sent with ?confirm=true; ?dry_run=true validates and reports what
//     the change would do without storing it.
//   - Every stored change makes a new global version; the served document
//     has the ETag VersionETag(version) and answers 304 to a matching
//     If-None-Match. With "Prefer: wait=N" (seconds) such a request is held
//     until a newer version exists or N seconds pass (long-poll).
//
// Every endpoint, with its bodies, status codes, headers and curl examples,
// is described in docs/RULES-API.md.
package rulesapi
