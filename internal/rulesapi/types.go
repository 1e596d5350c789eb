package rulesapi

import "time"

// Paths of the service. Team and rule names are path segments.
const (
	// ServedPath is where daemons fetch the rules document
	// (sluiced --rules-url http://HOST:PORT/rules.yaml). No token needed.
	ServedPath = "/rules.yaml"
	// HealthPath answers 200 while the process runs.
	HealthPath = "/healthz"
	// ReadyPath answers 200 while the database answers, else 503.
	ReadyPath = "/readyz"
	// MetricsPath serves Prometheus metrics.
	MetricsPath = "/metrics"
	// UIPath is where the web page is mounted, when the binary has one.
	UIPath = "/ui/"
	// APIPrefix prefixes every JSON endpoint.
	APIPrefix = "/v1"
)

// Limits on what the API accepts.
const (
	// MaxNameLen bounds a team's and a rule's name. A served rule is named
	// "<team>.<rule>", which the daemon caps at 128 bytes.
	MaxNameLen = 63
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes = 1 << 20
	// MaxRulesPerTeam bounds how many rules one team holds.
	MaxRulesPerTeam = 1000
	// MaxWait bounds a long-poll's wait.
	MaxWait = 5 * time.Minute
)

// Actor kinds, in WhoAmI and AuditEntry.
const (
	ActorAdmin = "admin"
	ActorTeam  = "team"
)

// Change actions, in Change and AuditEntry.
const (
	ActionCreate      = "create"       // a rule was created
	ActionUpdate      = "update"       // a rule was changed
	ActionDelete      = "delete"       // a rule was deleted
	ActionReplace     = "replace"      // a team's whole rules document was replaced (push)
	ActionRollback    = "rollback"     // a team's rules went back to an earlier version
	ActionTeamCreate  = "team.create"  // admin created a team
	ActionTeamDelete  = "team.delete"  // admin deleted a team (and its rules)
	ActionTokenCreate = "token.create" // a token was issued
	ActionTokenRevoke = "token.revoke" // a token was revoked
)

// WhoAmI is GET /v1/whoami's answer: what the bearer token is.
type WhoAmI struct {
	Kind    string `json:"kind"`           // ActorAdmin or ActorTeam
	Team    string `json:"team,omitempty"` // the token's team, for ActorTeam
	TokenID string `json:"token_id"`
}

// Status is GET /v1/status's answer: the served document's version.
type Status struct {
	Version   int64     `json:"version"`
	ETag      string    `json:"etag"`
	UpdatedAt time.Time `json:"updated_at"`
	Rules     int       `json:"rules"` // rules in the served document
	Teams     int       `json:"teams"`
}

// Team is a namespace of rules. Its rules are served as "<name>.<rule>".
type Team struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// Version is the global version that last changed the team's rules
	// (0: never); the team's rules' ETag is VersionETag(Version).
	Version int64 `json:"version"`
	Rules   int   `json:"rules"`
}

// CreateTeamRequest is POST /v1/teams's body.
type CreateTeamRequest struct {
	Name string `json:"name"`
}

// TeamList is GET /v1/teams's answer.
type TeamList struct {
	Teams []Team `json:"teams"`
}

// Token describes an API token. Secret is set only in the answer that
// issued it: the service keeps only its SHA-256.
type Token struct {
	ID        string     `json:"id"`
	Team      string     `json:"team,omitempty"` // empty for an admin token
	Name      string     `json:"name"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	Secret    string     `json:"token,omitempty"`
}

// CreateTokenRequest is POST /v1/teams/{team}/tokens's body.
type CreateTokenRequest struct {
	Name string `json:"name"` // a label, e.g. "ci"
}

// TokenList is GET /v1/teams/{team}/tokens's answer.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// Rule is one rule of a team. Spec is the rule's body in the daemon's
// rules YAML, exactly what goes under its name in a rules file, e.g.
// "rate: 100/1s\nburst: 200\n".
type Rule struct {
	Team string `json:"team"`
	Name string `json:"name"`
	// Served is the name daemons know it by: "<team>.<name>".
	Served    string    `json:"served"`
	Spec      string    `json:"spec"`
	Version   int64     `json:"version"` // the global version that last changed it
	UpdatedAt time.Time `json:"updated_at"`
}

// PutRuleRequest is PUT /v1/teams/{team}/rules/{rule}'s body.
type PutRuleRequest struct {
	Spec string `json:"spec"`
}

// TeamRules is GET /v1/teams/{team}/rules's answer: the team's rules, and
// the same as a rules file with the team's own names (what `sluice rules
// pull` writes and `push` sends back).
type TeamRules struct {
	Team     string `json:"team"`
	Version  int64  `json:"version"`
	Rules    []Rule `json:"rules"`
	Document string `json:"document"`
}

// PutTeamRulesRequest is PUT /v1/teams/{team}/rules's body: a rules file
// ("rules:" with the team's own rule names, no unknown_rule) that replaces
// all the team's rules.
type PutTeamRulesRequest struct {
	Document string `json:"document"`
}

// RollbackRequest is POST /v1/teams/{team}/rollback's body. With ToVersion
// 0 the team's rules go back to what they were before its latest change;
// else to what they were at that global version.
type RollbackRequest struct {
	ToVersion int64 `json:"to_version,omitempty"`
}

// Change is one rule's change within a ChangeResult. Before is empty for a
// created rule, After for a deleted one.
type Change struct {
	Rule   string `json:"rule"`
	Action string `json:"action"` // ActionCreate, ActionUpdate or ActionDelete
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
	// Diff is a unified diff of Before and After.
	Diff string `json:"diff,omitempty"`
}

// Loosening is one way a change removes or loosens a limit by more than
// the service's factor.
type Loosening struct {
	Rule string `json:"rule"`
	// Key is the override key, empty for the rule's own limits.
	Key string `json:"key,omitempty"`
	// Factor is how many times looser (0 when the limit is removed).
	Factor float64 `json:"factor,omitempty"`
	Reason string  `json:"reason"`
}

// ChangeResult answers every change (rule PUT/DELETE, team rules PUT,
// rollback), and a dry run of one.
type ChangeResult struct {
	// Version is the new global version (the current one when nothing
	// changed or on a dry run).
	Version int64 `json:"version"`
	// ETag is the team's rules' ETag after the change.
	ETag    string   `json:"etag"`
	Changed bool     `json:"changed"`
	DryRun  bool     `json:"dry_run,omitempty"`
	Changes []Change `json:"changes"`
	// Loosenings lists what needed (or, in a dry run, would need) ?confirm=true.
	Loosenings []Loosening `json:"loosenings,omitempty"`
}

// HistoryEntry is one version of a team's rules.
type HistoryEntry struct {
	Version int64     `json:"version"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"` // "admin" or "team:<name>"
	TokenID string    `json:"token_id"`
	Action  string    `json:"action"`
	Rule    string    `json:"rule,omitempty"` // for a one-rule change
	// Document is the team's rules file after this version.
	Document string `json:"document"`
}

// History is GET /v1/teams/{team}/history's answer, newest first.
type History struct {
	Team    string         `json:"team"`
	Entries []HistoryEntry `json:"entries"`
}

// AuditEntry is one record of the audit log: who did what, when, with the
// before and after of what changed (a rule's spec, a team's rules
// document, or a team's or token's description).
type AuditEntry struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"` // "admin" or "team:<name>"
	TokenID string    `json:"token_id"`
	Action  string    `json:"action"`
	Team    string    `json:"team,omitempty"`
	Rule    string    `json:"rule,omitempty"`
	Version int64     `json:"version,omitempty"` // the global version made, for rule changes
	Before  string    `json:"before,omitempty"`
	After   string    `json:"after,omitempty"`
}

// AuditLog is GET /v1/audit's answer, newest first. Fetch older entries
// with ?before=<NextBefore>; 0 means there are none.
type AuditLog struct {
	Entries    []AuditEntry `json:"entries"`
	NextBefore int64        `json:"next_before,omitempty"`
}

// ValidName reports whether s is a valid team or rule name: lowercase
// letters, digits and inner dashes (a DNS label), at most MaxNameLen bytes.
// The service checks names with it; clients may check before sending.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameLen || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
