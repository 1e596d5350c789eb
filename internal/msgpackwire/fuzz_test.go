package msgpackwire

import (
	"errors"
	"math"
	"testing"
)

// FuzzDecoder runs a fuzzed sequence of reads (ops picks each one) over fuzzed
// bytes: no read panics, the offset only moves forward and never past the end,
// a failed read wraps ErrMalformed, an array length never exceeds the bytes
// left, and a string never reaches past the buffer.
func FuzzDecoder(f *testing.F) {
	var valid []byte
	valid = AppendArrayHeader(valid, 5)
	valid = AppendUint(valid, 1<<40)
	valid = AppendStr(valid, "key")
	valid = AppendBool(valid, true)
	valid = AppendFloat64(valid, -2.5)
	valid = AppendInt(valid, -1000)
	f.Add(valid, []byte{0, 1, 2, 3, 4, 1, 5})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, []byte{0})
	f.Add([]byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, []byte{2})
	f.Add([]byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}, []byte{1, 4})
	f.Add([]byte{0xca, 0x7f, 0xc0, 0, 0}, []byte{4})
	f.Fuzz(func(t *testing.T, b, ops []byte) {
		d := NewDecoder(b)
		for _, op := range ops {
			before := d.Offset()
			var err error
			switch op % 6 {
			case 0:
				var n int
				n, err = d.ArrayLen()
				if err == nil && (n < 0 || n > d.Remaining()) {
					t.Fatalf("array of %d elements with %d bytes left", n, d.Remaining())
				}
			case 1:
				_, err = d.Uint()
			case 2:
				var p []byte
				p, err = d.Bytes()
				if err == nil && len(p) >= d.Offset()-before {
					t.Fatalf("string of %d bytes read from %d bytes", len(p), d.Offset()-before)
				}
			case 3:
				_, err = d.Bool()
			case 4:
				_, err = d.Float64()
			case 5:
				err = d.End()
			}
			if d.Offset() < before || d.Offset() > len(b) || d.Remaining() != len(b)-d.Offset() {
				t.Fatalf("offset moved from %d to %d in %d bytes", before, d.Offset(), len(b))
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if err == nil && op%6 != 5 && d.Offset() == before {
				t.Fatalf("op %d succeeded without reading a byte", op%6)
			}
		}
	})
}

// FuzzRoundTrip encodes fuzzed values and reads them back.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint64(0), int64(0), "", 0.0, false, uint16(0))
	f.Add(uint64(math.MaxUint64), int64(math.MinInt64), "hello", math.Inf(1), true, uint16(300))
	f.Add(uint64(1<<16), int64(-33), string(make([]byte, 70000)), math.NaN(), true, uint16(16))
	f.Fuzz(func(t *testing.T, u uint64, i int64, s string, fl float64, flag bool, n uint16) {
		b := AppendArrayHeader(nil, int(n))
		for range n {
			b = AppendUint(b, 0)
		}
		b = AppendUint(b, u)
		b = AppendStr(b, s)
		b = AppendBool(b, flag)
		b = AppendFloat64(b, fl)
		b = AppendInt(b, i)
		d := NewDecoder(b)
		if got, err := d.ArrayLen(); err != nil || got != int(n) {
			t.Fatalf("array: %d %v, want %d", got, err, n)
		}
		for range n {
			if v, err := d.Uint(); err != nil || v != 0 {
				t.Fatalf("element: %d %v", v, err)
			}
		}
		if got, err := d.Uint(); err != nil || got != u {
			t.Fatalf("uint: %d %v, want %d", got, err, u)
		}
		if got, err := d.Bytes(); err != nil || string(got) != s {
			t.Fatalf("str: %q %v", got, err)
		}
		if got, err := d.Bool(); err != nil || got != flag {
			t.Fatalf("bool: %v %v", got, err)
		}
		if got, err := d.Float64(); err != nil || math.Float64bits(got) != math.Float64bits(fl) {
			t.Fatalf("float: %v %v, want %v", got, err, fl)
		}
		// Signed integers read back as floats (exactly, for |i| < 2^53) and,
		// when non-negative, as unsigned integers.
		save := d
		if got, err := d.Float64(); err != nil || got != float64(i) {
			t.Fatalf("int as float: %v %v, want %d", got, err, i)
		}
		d = save
		got, err := d.Uint()
		if i >= 0 && (err != nil || got != uint64(i)) {
			t.Fatalf("int as uint: %d %v, want %d", got, err, i)
		}
		if i < 0 && !errors.Is(err, ErrMalformed) {
			t.Fatalf("negative %d read as uint %d, %v", i, got, err)
		}
		if i >= 0 {
			if err := d.End(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
