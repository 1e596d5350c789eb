package clientlib

// Sizes of msgpack encodings as package internal/msgpackwire writes them, so a request's
// frame size is known before anything is queued (see conn.write).

// uintSize is the encoded size of an unsigned integer.
func uintSize(v uint64) int {
	switch {
	case v <= 0x7f:
		return 1
	case v <= 0xff:
		return 2
	case v <= 0xffff:
		return 3
	case v <= 0xffffffff:
		return 5
	}
	return 9
}

// strSize is the encoded size of a string of n bytes.
func strSize(n int) int {
	switch {
	case n <= 31:
		return 1 + n
	case n <= 0xff:
		return 2 + n
	case n <= 0xffff:
		return 3 + n
	}
	return 5 + n
}

// arraySize is the encoded size of an array header of n elements.
func arraySize(n int) int {
	switch {
	case n <= 15:
		return 1
	case n <= 0xffff:
		return 3
	}
	return 5
}

// checksSize is the body size of a CHECK frame without its id: keys longer
// than maxKey count as the bounded keys that will be sent.
func checksSize(checks []Check, maxKey int) int {
	n := arraySize(3) + uintSize(2) + arraySize(len(checks))
	for i := range checks {
		ch := &checks[i]
		key := len(ch.Key)
		if maxKey > 0 && key > maxKey {
			key = maxKey
		}
		n += arraySize(4) + strSize(len(ch.Rule)) + strSize(key) + uintSize(uint64(ch.Cost))
		if ch.MaxDelay > 0 {
			n += uintSize(uint64(ch.MaxDelay))
		}
	}
	return n
}

// inspectSize is the body size of an INSPECT frame without its id.
func inspectSize(rule, key string) int {
	return arraySize(4) + uintSize(5) + strSize(len(rule)) + strSize(len(key))
}
