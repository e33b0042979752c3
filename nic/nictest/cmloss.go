package nictest

import (
	"encoding/binary"
	"sync"

	"github.com/vrnic/vrnicd/nic/link"
	"github.com/vrnic/vrnicd/transport/wire/rocelayers/mad"
)

// CMLoss is a link hook that drops the first n CM MADs of each attribute it
// was made with (a REQ, a REP, ...), so that tests see the CM retransmit.
// Set it with Host.Link.SetHook(l.Hook) on the end that sends them.
type CMLoss struct {
	mu      sync.Mutex
	left    map[uint16]int
	dropped map[uint16]int
}

// NewCMLoss drops the first n MADs of each of attrs (mad.Attr*).
func NewCMLoss(n int, attrs ...uint16) *CMLoss {
	l := &CMLoss{left: map[uint16]int{}, dropped: map[uint16]int{}}
	for _, a := range attrs {
		l.left[a] = n
	}
	return l
}

// cmMADOffset is where a QP1 MAD starts in an untagged frame: Ethernet,
// IPv4, UDP, BTH, DETH.
const cmMADOffset = 14 + 20 + 8 + 12 + 8

// Hook is the link.Hook: it drops a CM MAD over IPv4 RoCEv2 while its
// attribute has drops left, and delivers everything else.
func (l *CMLoss) Hook(f []byte) link.Action {
	if len(f) < cmMADOffset+mad.Size || f[12] != 0x08 || f[13] != 0 ||
		binary.BigEndian.Uint16(f[14+20+2:]) != 4791 || f[cmMADOffset+1] != mad.ClassCM {
		return link.Deliver
	}
	attr := binary.BigEndian.Uint16(f[cmMADOffset+16:])
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left[attr] > 0 {
		l.left[attr]--
		l.dropped[attr]++
		return link.Drop
	}
	return link.Deliver
}

// Dropped is how many MADs of attr the hook has dropped.
func (l *CMLoss) Dropped(attr uint16) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped[attr]
}
