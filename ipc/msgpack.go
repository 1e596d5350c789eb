package ipc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The encoder and decoder here cover the msgpack subset the protocol uses
// (arrays, unsigned integers, booleans, strings and binaries). They are written
// out by hand so that a request is decoded in place, without allocating, and so
// that every length read from the wire is checked against what remains of the
// frame before anything is sized by it.

// ErrMalformed is wrapped by every decoding error: the bytes are not a valid
// message of the protocol.
var ErrMalformed = errors.New("malformed message")

func appendArrayHeader(b []byte, n int) []byte {
	switch {
	case n <= 15:
		return append(b, msgpcode.FixedArrayLow|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, msgpcode.Array16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, msgpcode.Array32), uint32(n))
	}
}

func appendUint(b []byte, v uint64) []byte {
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

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, msgpcode.True)
	}
	return append(b, msgpcode.False)
}

func appendStr[S string | []byte](b []byte, s S) []byte {
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

// decoder reads msgpack values from a frame body in place.
type decoder struct {
	buf []byte
	off int
}

func (d *decoder) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrMalformed, what, d.off)
}

func (d *decoder) byte() (byte, error) {
	if d.off >= len(d.buf) {
		return 0, d.fail("truncated")
	}
	c := d.buf[d.off]
	d.off++
	return c, nil
}

func (d *decoder) take(n int) ([]byte, error) {
	if n < 0 || n > len(d.buf)-d.off {
		return nil, d.fail("length beyond end of frame")
	}
	p := d.buf[d.off : d.off+n]
	d.off += n
	return p, nil
}

func (d *decoder) be(n int) (uint64, error) {
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

// arrayLen reads an array header. The length is checked against the bytes left
// (every element takes at least one byte) so a lying header cannot make a
// caller allocate.
func (d *decoder) arrayLen() (int, error) {
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

// uint reads a non-negative integer in any msgpack integer encoding.
func (d *decoder) uint() (uint64, error) {
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

func (d *decoder) bool() (bool, error) {
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

// bytes reads a str or bin value, returning a slice of the frame (no copy).
func (d *decoder) bytes() ([]byte, error) {
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

func (d *decoder) end() error {
	if d.off != len(d.buf) {
		return d.fail("trailing bytes")
	}
	return nil
}
