package gossip

import (
	"fmt"

	mp "github.com/sluicelabs/sluice/internal/msgpackwire"
)

// The reset message, a third kind beside counters and push-pull states:
//
//	reset  [3, sender, [[limit, key, at], ...](, resend)]
//
// resend, a boolean, is present and true when the resets are old ones told
// again to a member that joined or rejoined: it clears only buckets the
// reset covers (epoch at or below at), keeping one created since (after a
// restart). A live reset clears the key's bucket whatever its epoch.
//
// Each entry clears one key under one limit name (a rule's limit, as
// counters name it); at is the reset's instant in Unix nanoseconds, and the
// reset covers every counter of that limit and key whose epoch is at or
// below it (see Syncer.Reset). Resets travel in reliable (TCP) user
// messages: to every member when made, and again to a member that joins or
// rejoins while the reset is remembered (an hour).
//
// A peer that does not know kind 3 refuses the message as malformed (it
// counts it as a bad packet and logs a warning) and applies nothing: older
// nodes keep their debts, newer ones clear them. Nodes of this version
// ignore, without a warning, any kind above the ones they know.
const msgReset = 3

// maxResetEntries caps the entries of one reset message.
const maxResetEntries = 4096

// resetEntry is one (limit, key) cleared at an instant.
type resetEntry struct {
	limit, key string
	at         uint64
}

func encodeResets(sender string, entries []resetEntry, resend bool) []byte {
	n := 3
	if resend {
		n = 4
	}
	b := mp.AppendArrayHeader(nil, n)
	b = mp.AppendUint(b, msgReset)
	b = mp.AppendStr(b, sender)
	b = mp.AppendArrayHeader(b, len(entries))
	for _, e := range entries {
		b = mp.AppendArrayHeader(b, 3)
		b = mp.AppendStr(b, e.limit)
		b = mp.AppendStr(b, e.key)
		b = mp.AppendUint(b, e.at)
	}
	if resend {
		b = mp.AppendBool(b, true)
	}
	return b
}

// decodeResets validates a whole reset message before returning any entry.
func decodeResets(b []byte) (sender string, entries []resetEntry, resend bool, err error) {
	d := mp.NewDecoder(b)
	fields, err := d.ArrayLen()
	if err != nil || (fields != 3 && fields != 4) {
		return "", nil, false, fmt.Errorf("reset message: %w", orMalformed(err, &d, "want 3 or 4 fields"))
	}
	if t, err := d.Uint(); err != nil || t != msgReset {
		return "", nil, false, fmt.Errorf("reset message: %w", orMalformed(err, &d, "wrong type"))
	}
	if sender, err = str(&d, maxNameLen, "sender"); err != nil {
		return "", nil, false, fmt.Errorf("reset message: %w", err)
	}
	n, err := d.ArrayLen()
	if err != nil || n > maxResetEntries {
		return "", nil, false, fmt.Errorf("reset message: %w", orMalformed(err, &d, "too many entries"))
	}
	entries = make([]resetEntry, 0, min(n, 64))
	for range n {
		if m, err := d.ArrayLen(); err != nil || m != 3 {
			return "", nil, false, fmt.Errorf("reset message: %w", orMalformed(err, &d, "entry must have 3 fields"))
		}
		var e resetEntry
		if e.limit, err = str(&d, maxRuleLen, "limit"); err != nil {
			return "", nil, false, fmt.Errorf("reset message: %w", err)
		}
		if e.key, err = str(&d, maxKeyLen, "key"); err != nil {
			return "", nil, false, fmt.Errorf("reset message: %w", err)
		}
		if e.at, err = d.Uint(); err != nil {
			return "", nil, false, fmt.Errorf("reset message: %w", err)
		}
		if e.limit == "" || e.key == "" || e.at == 0 {
			return "", nil, false, fmt.Errorf("reset message: %w", d.Fail("empty limit or key, or instant 0"))
		}
		entries = append(entries, e)
	}
	if fields == 4 {
		if resend, err = d.Bool(); err != nil || !resend {
			return "", nil, false, fmt.Errorf("reset message: %w", orMalformed(err, &d, "resend sent false instead of omitted"))
		}
	}
	if err := d.End(); err != nil {
		return "", nil, false, fmt.Errorf("reset message: %w", err)
	}
	return sender, entries, resend, nil
}

// packetKind reads a message's kind (its array's first element) without
// decoding the rest; ok is false when it does not start as every message does.
func packetKind(b []byte) (kind uint64, ok bool) {
	d := mp.NewDecoder(b)
	if n, err := d.ArrayLen(); err != nil || n < 1 {
		return 0, false
	}
	kind, err := d.Uint()
	return kind, err == nil
}
