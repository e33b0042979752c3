package transport

import "github.com/vrnic/vrnicd/transport/mem"

// resolveSGL looks up every SGE of sgl once for a whole message, appending
// one Ref per SGE to refs (an empty Ref for a zero-length SGE). On a failed
// lookup it releases what it took and returns the error.
func resolveSGL(m Memory, pd mem.PD, sgl []SGE, access mem.Access, refs []mem.Ref) ([]mem.Ref, error) {
	refs = refs[:0]
	for _, sge := range sgl {
		if sge.Length == 0 {
			refs = append(refs, mem.Ref{})
			continue
		}
		r, err := m.Local(pd, sge.LKey, sge.Addr, uint64(sge.Length), access)
		if err != nil {
			return releaseRefs(refs), err
		}
		refs = append(refs, r)
	}
	return refs, nil
}

// releaseRefs drops every Ref and returns the emptied slice.
func releaseRefs(refs []mem.Ref) []mem.Ref {
	for i := range refs {
		refs[i].Release()
	}
	return refs[:0]
}

// copySGL copies between buf and the message bytes [off, off+len(buf)) that
// sgl describes (refs resolved by resolveSGL): into the SGEs if toSGL, out
// of them otherwise.
func copySGL(sgl []SGE, refs []mem.Ref, off uint64, buf []byte, toSGL bool) {
	for i, sge := range sgl {
		l := uint64(sge.Length)
		if off >= l {
			off -= l
			continue
		}
		k := min(l-off, uint64(len(buf)))
		if toSGL {
			refs[i].WriteAt(buf[:k], int64(off))
		} else {
			refs[i].ReadAt(buf[:k], int64(off))
		}
		buf = buf[k:]
		off = 0
		if len(buf) == 0 {
			return
		}
	}
}
