package link

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// MaxSegments is the most pieces one frame may have in WriteSegments.
const MaxSegments = 8

// SegmentWriter is implemented by links that send a frame gathered from
// several buffers (Raw), so a datapath can send headers it built in a
// small buffer, the payload straight from a memory region and the ICRC
// from a third, without first copying them into one frame.
type SegmentWriter interface {
	// WriteSegments sends frame i as the concatenation of frames[i]'s
	// pieces (at most MaxSegments) and returns how many frames were sent.
	// It does not retain the buffers.
	WriteSegments(frames [][][]byte) (int, error)
}

// WriteSegments implements SegmentWriter with sendmmsg, one message of up
// to MaxSegments iovecs per frame, up to BatchSize frames per call.
func (r *Raw) WriteSegments(frames [][][]byte) (int, error) {
	for _, segs := range frames {
		if err := checkSegments(segs, r.MTU()); err != nil {
			return 0, err
		}
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.wsegs == nil {
		r.wsegs = make([]unix.Iovec, r.batch*MaxSegments)
	}
	done := 0
	for done < len(frames) {
		chunk := frames[done:min(len(frames), done+r.batch)]
		r.fillSegments(chunk)
		sent, err := r.sendmmsg(len(chunk))
		clear(r.wsegs) // drop references to the caller's buffers
		done += sent
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// fillSegments points message i of r.whdrs at frame i's pieces.
func (r *Raw) fillSegments(chunk [][][]byte) {
	for i, segs := range chunk {
		iovs := r.wsegs[i*MaxSegments : i*MaxSegments : (i+1)*MaxSegments]
		for _, b := range segs {
			if len(b) == 0 {
				continue
			}
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iovs = append(iovs, v)
		}
		r.whdrs[i] = unix.Mmsghdr{}
		if len(iovs) > 0 {
			r.whdrs[i].Hdr.Iov = &iovs[0]
			r.whdrs[i].Hdr.SetIovlen(len(iovs))
		}
	}
}

// checkSegments validates one gathered frame against mtu.
func checkSegments(segs [][]byte, mtu int) error {
	if len(segs) > MaxSegments {
		return fmt.Errorf("link: frame in %d pieces, more than %d", len(segs), MaxSegments)
	}
	n := 0
	for _, b := range segs {
		n += len(b)
	}
	if n < EthernetHeaderLen {
		return ErrFrameTooShort
	}
	if n-EthernetHeaderLen > mtu {
		return fmt.Errorf("%w: %d > %d", ErrFrameTooBig, n-EthernetHeaderLen, mtu)
	}
	return nil
}

var _ SegmentWriter = (*Raw)(nil)
