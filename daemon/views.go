package daemon

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/sluicelabs/sluice/bucket"
	"github.com/sluicelabs/sluice/daemon/adminapi"
)

// RulesView describes the rules in force.
func (d *Daemon) RulesView() adminapi.RulesView {
	rs := d.Rules()
	out := adminapi.RulesView{Source: rs.Source, Hash: rs.Hash, UnknownRule: rs.UnknownRule.String(), Rules: []adminapi.RuleView{}}
	for _, n := range rs.Names() {
		r := rs.ByName[n]
		first := r.Limits[0]
		v := adminapi.RuleView{Name: n, Limit: first.Count(), Period: first.Period().String(), Burst: first.Burst(),
			Algorithm: first.Algorithm().String(), Overrides: len(r.Overrides), Shadow: r.Shadow, SoftPercent: r.SoftPercent}
		if len(r.Limits) > 1 {
			for _, l := range r.Limits {
				v.Limits = append(v.Limits, limitView(l))
			}
		}
		out.Rules = append(out.Rules, v)
	}
	return out
}

// MembersView lists the cluster's members as this node sees them and flags
// those whose rules hash differs from this node's: they decide the same
// keys under other limits.
func (d *Daemon) MembersView() adminapi.MembersView {
	hash := d.Rules().Hash
	out := adminapi.MembersView{Self: d.settings.NodeName, RulesHash: hash, Clustered: d.syncer != nil}
	if d.syncer == nil {
		out.Members = []adminapi.MemberView{{Name: d.settings.NodeName, State: "alive", Version: version, RulesHash: hash, Self: true}}
		return out
	}
	if c, ok := d.syncer.MemberStates(); ok {
		out.Census = &adminapi.MemberStates{Alive: c.Alive, Suspect: c.Suspect, Dead: c.Dead, Left: c.Left, At: c.At}
	}
	for _, m := range d.syncer.Members() {
		v := adminapi.MemberView{Name: m.Name, Addr: m.Addr, State: m.State, Version: m.Meta.Version, RulesHash: m.Meta.RulesHash,
			Self: m.Name == d.settings.NodeName}
		if m.State == "alive" {
			v.Drift = m.Meta.RulesHash != hash
			out.Drift = out.Drift || v.Drift
			if m.Meta.SecurityKnown {
				v.Encrypted, v.Labelled = &m.Meta.Encrypted, &m.Meta.Labelled
				if !m.Meta.Encrypted {
					out.Unencrypted++
				}
			}
		} else {
			v.Since = m.Since.UTC().Format(time.RFC3339)
		}
		out.Members = append(out.Members, v)
	}
	return out
}

// KeyView reads one key's bucket without charging it.
func (d *Daemon) KeyView(rule, key string) (adminapi.KeyView, bool) {
	ar, ok := d.rules.Load().byName[rule]
	if !ok {
		return adminapi.KeyView{}, false
	}
	k := []byte(key)
	now := d.now()
	lims := ar.LimitsFor(k)
	b, held := d.store.Balance(ar.ns[0], k, lims[0], now)
	v := adminapi.KeyView{Rule: rule, Key: key, Balance: b, Debt: max(-b, 0), Limit: lims[0].Count(), Period: lims[0].Period().String(),
		Burst: lims[0].Burst(), Algorithm: lims[0].Algorithm().String(), Held: held, Origins: []adminapi.OriginView{}}
	if len(lims) > 1 {
		for i, l := range lims {
			lv := limitView(l)
			lv.Balance, lv.Held = d.store.Balance(ar.ns[i], k, l, now)
			v.Limits = append(v.Limits, lv)
		}
	}
	if c, ok := d.store.Local(ar.ns[0], k); ok {
		v.Origins = append(v.Origins, adminapi.OriginView{Origin: d.settings.NodeName, Epoch: c.Epoch, Used: c.Used})
	}
	if d.syncer != nil {
		for _, o := range d.syncer.Origins(rule, key) {
			v.Origins = append(v.Origins, adminapi.OriginView{Origin: o.Origin, Epoch: o.Epoch, Used: o.Used})
		}
	}
	return v, true
}

// Busiest returns up to n keys with the largest share of their burst
// spent, most spent first. It visits every bucket that is not full (shard by
// shard, as push-pull does), so it is for operators, not the request path.
func (d *Daemon) Busiest(n int) []adminapi.BusyKey {
	top := make([]adminapi.BusyKey, 0, n+1)
	d.eachHeld(func(rule string, lim bucket.Limit, c bucket.Consumption, balance float64) bool {
		used := 1 - balance/float64(lim.Burst())
		if len(top) == n && used <= top[n-1].Used {
			return true
		}
		i, _ := slices.BinarySearchFunc(top, used, func(k adminapi.BusyKey, u float64) int { return cmp.Compare(u, k.Used) })
		top = slices.Insert(top, i, adminapi.BusyKey{Rule: rule, Key: strings.Clone(c.Key), Balance: balance, Burst: lim.Burst(), Used: used})
		if len(top) > n {
			top = top[:n]
		}
		return true
	})
	return top
}

// StatsView reads the decision counters of the rules in force.
func (d *Daemon) StatsView() adminapi.StatsView {
	out := adminapi.StatsView{Node: d.settings.NodeName, Time: time.Now(), Rules: map[string]adminapi.RuleStats{}}
	for name, ar := range d.rules.Load().byName {
		c := ar.counted
		out.Rules[name] = adminapi.RuleStats{Admitted: counterValue(c.admitted), Throttled: counterValue(c.throttled),
			ShadowThrottled: counterValue(c.shadow), Soft: counterValue(c.soft)}
	}
	return out
}

func limitView(l bucket.Limit) adminapi.LimitView {
	return adminapi.LimitView{Algorithm: l.Algorithm().String(), Limit: l.Count(), Period: l.Period().String(), Burst: l.Burst()}
}
