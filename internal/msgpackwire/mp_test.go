package msgpackwire

import (
	"math"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestNumbersRoundTripAndMatchStockMsgpack(t *testing.T) {
	for _, f := range []float64{0, -8, 3.25, -1e300, math.MaxFloat64} {
		b := AppendFloat64(nil, f)
		d := NewDecoder(b)
		if got, err := d.Float64(); err != nil || got != f || d.End() != nil {
			t.Errorf("float %v: got %v %v", f, got, err)
		}
		var stock float64
		if err := msgpack.Unmarshal(b, &stock); err != nil || stock != f {
			t.Errorf("stock decoder read %v as %v (%v)", f, stock, err)
		}
	}
	for _, v := range []int64{0, 5, -1, -32, -33, math.MinInt64, math.MaxInt64} {
		b := AppendInt(nil, v)
		var stock int64
		if err := msgpack.Unmarshal(b, &stock); err != nil || stock != v {
			t.Errorf("stock decoder read %d as %d (%v)", v, stock, err)
		}
		d := NewDecoder(b)
		if got, err := d.Float64(); err != nil || got != float64(v) {
			t.Errorf("Float64 of int %d = %v %v", v, got, err)
		}
	}
	for _, in := range []any{float32(1.5), int8(-7), uint16(300)} {
		b, _ := msgpack.Marshal(in)
		d := NewDecoder(b)
		if _, err := d.Float64(); err != nil {
			t.Errorf("Float64 of stock %T: %v", in, err)
		}
	}
}

func TestLyingLengthsAreRejectedBeforeUse(t *testing.T) {
	for _, b := range [][]byte{
		{0xdd, 0x7f, 0xff, 0xff, 0xff},      // array of 2^31 elements in 5 bytes
		{0xdb, 0x7f, 0xff, 0xff, 0xff, 'x'}, // string of 2^31 bytes
		{0xc6, 0x00, 0x00, 0x10, 0x00},      // bin of 4096 bytes, none present
	} {
		d := NewDecoder(b)
		if _, err := d.ArrayLen(); err == nil {
			t.Errorf("ArrayLen accepted %x", b)
		}
		d = NewDecoder(b)
		if _, err := d.Bytes(); err == nil {
			t.Errorf("Bytes accepted %x", b)
		}
	}
}
