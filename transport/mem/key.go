package mem

import "github.com/vrnic/vrnicd/verbsock/ibv"

// Keys have kernel rxe's layout: index << 8 | key byte. The index names the
// object and says which table it lives in; the key byte is chosen at random
// when the object is created and may be changed by the consumer with each
// REG_MR or BIND_MW, so that a peer holding an old key loses access.
const (
	MRIndexMin uint32 = 1       // rxe RXE_MIN_MR_INDEX
	MRIndexMax uint32 = 1 << 19 // rxe RXE_MAX_MR_INDEX
	MWIndexMin uint32 = 1<<19 + 1
	MWIndexMax uint32 = 1 << 20
)

// KeyIndex is the object index of a key (key >> 8): ibv.KeyIndex.
func KeyIndex(key uint32) uint32 { return ibv.KeyIndex(key) }

// KeyByte is the consumer-owned low byte of a key.
func KeyByte(key uint32) uint8 { return uint8(key) }

// MakeKey builds a key from an index and a key byte.
func MakeKey(index uint32, b uint8) uint32 { return index<<8 | uint32(b) }

// WithKeyByte returns key with its low byte replaced: ib_update_fast_reg_key.
func WithKeyByte(key uint32, b uint8) uint32 { return key&^0xFF | uint32(b) }

// NextKey bumps the low byte, wrapping within it and keeping the index:
// ibv_inc_rkey (ibv.NextKey).
func NextKey(key uint32) uint32 { return ibv.NextKey(key) }

// IsMRKey reports whether the key's index is in the MR range.
func IsMRKey(key uint32) bool {
	i := KeyIndex(key)
	return i >= MRIndexMin && i <= MRIndexMax
}

// IsMWKey reports whether the key's index is in the MW range (rxe's
// rkey_is_mw).
func IsMWKey(key uint32) bool {
	i := KeyIndex(key)
	return i >= MWIndexMin && i <= MWIndexMax
}
