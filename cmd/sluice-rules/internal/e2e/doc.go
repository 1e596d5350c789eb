// Package e2e holds the end-to-end tests of the rules service, all against
// real processes: sluice-rules (on SQLite and on PostgreSQL), three sluiced
// daemons polling it with --rules-url, the sluice CLI, and the web page in
// headless Chromium. They walk issue 19's "Done when": start the service
// with no flags, create a team and a rule with the CLI, see the daemons
// enforce it, change it in the web page, roll it back, read the audit log;
// and they measure how long a change takes to reach every daemon.
//
// It has no code outside its tests.
package e2e
