// Package adminapi holds the JSON documents of sluiced's admin endpoint
// (/v1/rules, /v1/members, /v1/keys, /v1/top, /v1/stats), shared by the
// daemon that writes them and the clients that read them (the sluice CLI),
// so that a client need not import the daemon and its dependencies.
package adminapi

import "time"

// Header is the request header the admin endpoint requires on every request
// that changes state (POST, DELETE), unless the body is JSON: a web page
// cannot send it cross-origin without the daemon's consent, which it never
// gives. Any non-empty value will do; the sluice CLI sends "1" on every
// request.
const Header = "Sluice-Admin"

// RuleView is one rule as /v1/rules shows it.
type RuleView struct {
	Name string `json:"name"`
	// Limit, Period, Burst and Algorithm describe the rule's first limit.
	Limit     int64  `json:"limit"`
	Period    string `json:"period"`
	Burst     int64  `json:"burst"`
	Algorithm string `json:"algorithm"`
	// Limits lists every limit when the rule has more than one.
	Limits      []LimitView `json:"limits,omitempty"`
	Overrides   int         `json:"overrides"`
	Shadow      bool        `json:"shadow,omitempty"`
	SoftPercent float64     `json:"soft_percent,omitempty"`
}

// RulesView is what /v1/rules returns.
type RulesView struct {
	Source      string     `json:"source"`
	Hash        string     `json:"hash"`
	UnknownRule string     `json:"unknown_rule"`
	Rules       []RuleView `json:"rules"`
}

// MemberView is one member as /v1/members shows it.
type MemberView struct {
	Name      string `json:"name"`
	Addr      string `json:"addr,omitempty"`
	State     string `json:"state"` // alive or gone (dead or left)
	Version   string `json:"version,omitempty"`
	RulesHash string `json:"rules_hash,omitempty"`
	// Drift is set on an alive member whose rules differ from this node's.
	Drift bool   `json:"drift"`
	Self  bool   `json:"self,omitempty"`
	Since string `json:"gone_since,omitempty"`
	// Encrypted and Labelled are what an alive member says of its gossip;
	// absent for a member too old to say (and when not clustered).
	Encrypted *bool `json:"encrypted,omitempty"`
	Labelled  *bool `json:"labelled,omitempty"`
}

// MembersView is what /v1/members returns.
type MembersView struct {
	Self      string `json:"self"`
	RulesHash string `json:"rules_hash"`
	Clustered bool   `json:"clustered"`
	// Drift is true when some alive member runs different rules.
	Drift   bool         `json:"drift"`
	Members []MemberView `json:"members"`
	// Census is memberlist's count of members by state as of its last
	// push-pull exchange (absent before the first).
	Census *MemberStates `json:"census,omitempty"`
	// Unencrypted counts the alive members that say they gossip in the clear.
	Unencrypted int `json:"unencrypted"`
}

// OriginView is one node's reported consumption of a key.
type OriginView struct {
	Origin string `json:"origin"`
	Epoch  uint64 `json:"epoch"`
	Used   uint64 `json:"used"`
}

// KeyView is what /v1/keys/{rule}/{key} returns.
type KeyView struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	// Balance to Algorithm describe the key under the rule's first limit:
	// tokens left for the buckets, requests left in the window for the
	// windows (negative: consumption beyond the limit).
	Balance   float64 `json:"balance"`
	Debt      float64 `json:"debt"`
	Limit     int64   `json:"limit"`
	Period    string  `json:"period"`
	Burst     int64   `json:"burst"`
	Algorithm string  `json:"algorithm"`
	// Limits lists the key under every limit when the rule has more than one.
	Limits []LimitView `json:"limits,omitempty"`
	// Held is false when the daemon holds no bucket for the key (it is full).
	Held bool `json:"held"`
	// Origins are the cumulative counters of the key's current bucket
	// epochs: this node's own first, then what each peer reported.
	Origins []OriginView `json:"origins"`
}

// BusyKey is one key deep into its burst, as /v1/top lists it.
type BusyKey struct {
	Rule string `json:"rule"`
	// Key is the client key, or unless the daemon runs with
	// --admin-show-keys, its redacted form: up to its first 4 bytes, "…",
	// and the first 12 hex digits of its SHA-256.
	Key string `json:"key"`
	// Redacted says Key is the redacted form.
	Redacted bool    `json:"redacted,omitempty"`
	Balance  float64 `json:"balance"`
	Burst    int64   `json:"burst"`
	// Used is the share of the burst spent: 0 full, 1 empty, above 1 in debt.
	Used float64 `json:"used"`
}

// RuleStats are one rule's decisions since the daemon started.
type RuleStats struct {
	Admitted        uint64 `json:"admitted"`
	Throttled       uint64 `json:"throttled"`
	ShadowThrottled uint64 `json:"shadow_throttled"`
	Soft            uint64 `json:"soft"`
}

// StatsView is what /v1/stats returns: cumulative counts, so that a poller
// takes differences for rates.
type StatsView struct {
	Node  string               `json:"node"`
	Time  time.Time            `json:"time"`
	Rules map[string]RuleStats `json:"rules"`
}

// MemberStates counts the members memberlist knows in each state, this node
// included, as of its last census.
type MemberStates struct {
	Alive   int       `json:"alive"`
	Suspect int       `json:"suspect"`
	Dead    int       `json:"dead"`
	Left    int       `json:"left"`
	At      time.Time `json:"at"`
}

// LimitView is one limit of a rule, and in a KeyView, one key's standing
// under it.
type LimitView struct {
	Algorithm string  `json:"algorithm"`
	Limit     int64   `json:"limit"`
	Period    string  `json:"period"`
	Burst     int64   `json:"burst"`
	Balance   float64 `json:"balance,omitempty"`
	Held      bool    `json:"held,omitempty"`
}

// ResetView is what DELETE /v1/keys/{rule}/{key} returns: the key was reset
// on this node, and how many other members acknowledged the reset.
type ResetView struct {
	Rule string    `json:"rule"`
	Key  string    `json:"key"`
	Node string    `json:"node"`
	At   time.Time `json:"reset_at"`
	// Clustered is false for a daemon outside a cluster (Peers, Told: 0).
	Clustered bool `json:"clustered"`
	// Peers is how many other members were alive; Told to how many the
	// reset was delivered over TCP (each applies it on receipt); Failed
	// names the others, which learn of it when they rejoin.
	Peers  int      `json:"peers"`
	Told   int      `json:"told"`
	Failed []string `json:"failed"`
}
