// Package msgpackwire is the msgpack subset Sluice speaks on its wires (arrays,
// integers, booleans, floats, strings and binaries), written out by hand so
// that messages are encoded and decoded without allocating, and so that every
// length read from untrusted bytes (a client, a peer) is checked against what
// remains of the buffer before anything is sized by it. It produces and
// accepts standard msgpack: any msgpack library can talk to it.
//
// Both wires use it: package ipc (client ↔ daemon frames) and package gossip
// (daemon ↔ daemon messages), which import it under the short name mp. It
// is a codec only: what the messages mean is each wire's own business.
package msgpackwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrMalformed is wrapped by every decoding error: the bytes are not a valid
// message of the protocol.
var ErrMalformed = errors.New("malformed message")

// AppendArrayHeader appends the header of an array of n elements in its
// shortest form (fixarray, array 16 or array 32); the elements follow it.
func AppendArrayHeader(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, msgpcode.FixedArrayLow|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, msgpcode.Array16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, msgpcode.Array32), uint32(n))
	}
}

// AppendUint appends a non-negative integer in its shortest msgpack form.
func AppendUint(b []byte, v uint64) []byte {
	switch {
	case v <= uint64(msgpcode.PosFixedNumHigh):
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, msgpcode.Uint8, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, msgpcode.Uint16), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, msgpcode.Uint32), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, msgpcode.Uint64), v)
	}
}

// AppendBool appends a boolean.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, msgpcode.True)
	}
	return append(b, msgpcode.False)
}

// AppendStr appends s as a msgpack str in its shortest form (fixstr, str 8,
// str 16 or str 32). A []byte is written as a str too: Bytes reads either.
func AppendStr[S string | []byte](b []byte, s S) []byte {
	n := len(s)
	switch {
	case n <= 31:
		b = append(b, msgpcode.FixedStrLow|byte(n))
	case n <= math.MaxUint8:
		b = append(b, msgpcode.Str8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, msgpcode.Str16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, msgpcode.Str32), uint32(n))
	}
	return append(b, s...)
}

// Decoder reads msgpack values from a byte slice in place. The zero value is
// not useful; make one with NewDecoder.
type Decoder struct {
	buf []byte
	off int
}

// NewDecoder returns a decoder reading b from the start.
func NewDecoder(b []byte) Decoder { return Decoder{buf: b} }

// Offset is how many bytes have been read.
func (d *Decoder) Offset() int { return d.off }

// Remaining is how many bytes are left.
func (d *Decoder) Remaining() int { return len(d.buf) - d.off }

// Fail returns an ErrMalformed error describing what is wrong at the current offset.
func (d *Decoder) Fail(what string) error { return d.fail(what) }

func (d *Decoder) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrMalformed, what, d.off)
}

func (d *Decoder) byte() (byte, error) {
	if d.off >= len(d.buf) {
		return 0, d.fail("truncated")
	}
	c := d.buf[d.off]
	d.off++
	return c, nil
}

func (d *Decoder) take(n int) ([]byte, error) {
	if n < 0 || n > len(d.buf)-d.off {
		return nil, d.fail("length beyond end of frame")
	}
	p := d.buf[d.off : d.off+n]
	d.off += n
	return p, nil
}

func (d *Decoder) be(n int) (uint64, error) {
	p, err := d.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// ArrayLen reads an array header and returns the number of elements. The length is checked against the bytes left
// (every element takes at least one byte) so a lying header cannot make a
// caller allocate.
func (d *Decoder) ArrayLen() (int, error) {
	c, err := d.byte()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case msgpcode.IsFixedArray(c):
		n = uint64(c & msgpcode.FixedArrayMask)
	case c == msgpcode.Array16:
		n, err = d.be(2)
	case c == msgpcode.Array32:
		n, err = d.be(4)
	default:
		return 0, d.fail(fmt.Sprintf("expected array, got 0x%02x", c))
	}
	if err != nil {
		return 0, err
	}
	if n > uint64(len(d.buf)-d.off) {
		return 0, d.fail("array longer than frame")
	}
	return int(n), nil
}

// Uint reads a non-negative integer in any msgpack integer encoding.
func (d *Decoder) Uint() (uint64, error) {
	c, err := d.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= msgpcode.PosFixedNumHigh:
		return uint64(c), nil
	case c == msgpcode.Uint8:
		return d.be(1)
	case c == msgpcode.Uint16:
		return d.be(2)
	case c == msgpcode.Uint32:
		return d.be(4)
	case c == msgpcode.Uint64:
		return d.be(8)
	case c == msgpcode.Int8, c == msgpcode.Int16, c == msgpcode.Int32, c == msgpcode.Int64:
		size := 1 << (c - msgpcode.Int8) // 1, 2, 4 or 8 bytes
		v, err := d.be(size)
		if err != nil {
			return 0, err
		}
		if v>>(uint(size)*8-1) != 0 {
			return 0, d.fail("negative integer")
		}
		return v, nil
	case c >= msgpcode.NegFixedNumLow:
		return 0, d.fail("negative integer")
	}
	return 0, d.fail(fmt.Sprintf("expected integer, got 0x%02x", c))
}

// Bool reads a boolean.
func (d *Decoder) Bool() (bool, error) {
	c, err := d.byte()
	if err != nil {
		return false, err
	}
	switch c {
	case msgpcode.True:
		return true, nil
	case msgpcode.False:
		return false, nil
	}
	return false, d.fail(fmt.Sprintf("expected bool, got 0x%02x", c))
}

// Bytes reads a str or bin value, returning a slice of the frame (no copy).
func (d *Decoder) Bytes() ([]byte, error) {
	c, err := d.byte()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case msgpcode.IsFixedString(c):
		n = uint64(c & msgpcode.FixedStrMask)
	case c == msgpcode.Str8, c == msgpcode.Bin8:
		n, err = d.be(1)
	case c == msgpcode.Str16, c == msgpcode.Bin16:
		n, err = d.be(2)
	case c == msgpcode.Str32, c == msgpcode.Bin32:
		n, err = d.be(4)
	default:
		return nil, d.fail(fmt.Sprintf("expected string, got 0x%02x", c))
	}
	if err != nil {
		return nil, err
	}
	return d.take(int(n))
}

// End reports an ErrMalformed error unless every byte has been read: a
// message is exactly one value, with nothing after it.
func (d *Decoder) End() error {
	if d.off != len(d.buf) {
		return d.fail("trailing bytes")
	}
	return nil
}

// AppendInt appends a signed integer in its shortest msgpack form.
func AppendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return AppendUint(b, uint64(v))
	}
	if v >= -32 {
		return append(b, byte(v))
	}
	return binary.BigEndian.AppendUint64(append(b, msgpcode.Int64), uint64(v))
}

// AppendFloat64 appends a float64.
func AppendFloat64(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, msgpcode.Double), math.Float64bits(v))
}

// Float64 reads a float64, a float32 or any integer as a float64.
func (d *Decoder) Float64() (float64, error) {
	if d.off >= len(d.buf) {
		return 0, d.fail("truncated")
	}
	switch c := d.buf[d.off]; {
	case c == msgpcode.Double:
		d.off++
		v, err := d.be(8)
		return math.Float64frombits(v), err
	case c == msgpcode.Float:
		d.off++
		v, err := d.be(4)
		return float64(math.Float32frombits(uint32(v))), err
	case c >= msgpcode.NegFixedNumLow:
		d.off++
		return float64(int8(c)), nil
	case c >= msgpcode.Int8 && c <= msgpcode.Int64:
		d.off++
		size := 1 << (c - msgpcode.Int8)
		v, err := d.be(size)
		shift := 64 - 8*size // sign-extend from size bytes
		return float64(int64(v<<shift) >> shift), err
	}
	v, err := d.Uint()
	return float64(v), err
}
