package verbsock

import "github.com/vrnic/vrnicd/verbsock/ibv"

// QPAttrFromWire and QPAttrToWire convert between the wire form and the
// attributes (ibv.QPAttr, which the engine's transport.QPAttr and the
// SDK's verbs.QPAttr are): the one conversion, used by the server and the
// SDK alike.
func QPAttrFromWire(w *QPAttr) ibv.QPAttr {
	return ibv.QPAttr{
		State: ibv.QPState(w.State), CurState: ibv.QPState(w.CurState), PathMTU: ibv.MTU(w.PathMTU),
		QKey: w.QKey, RQPSN: w.RQPSN, SQPSN: w.SQPSN, DestQPN: w.DestQPN, AccessFlags: ibv.Access(w.AccessFlags),
		AV: AVFromWire(&w.AV), PKeyIndex: w.PKeyIndex, Port: w.Port, MaxRdAtomic: w.MaxRdAtomic,
		MaxDestRdAtomic: w.MaxDestRdAtomic, MinRNRTimer: w.MinRNRTimer, Timeout: w.Timeout, RetryCnt: w.RetryCnt,
		RNRRetry: w.RNRRetry, SQDrainNotify: w.SQDrainNotify != 0,
	}
}

// QPAttrToWire is QPAttrFromWire the other way.
func QPAttrToWire(a *ibv.QPAttr) QPAttr {
	w := QPAttr{
		State: uint8(a.State), CurState: uint8(a.CurState), PathMTU: uint8(a.PathMTU), Port: a.Port, QKey: a.QKey,
		RQPSN: a.RQPSN, SQPSN: a.SQPSN, DestQPN: a.DestQPN, AccessFlags: uint32(a.AccessFlags), PKeyIndex: a.PKeyIndex,
		MaxRdAtomic: a.MaxRdAtomic, MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, Timeout: a.Timeout,
		RetryCnt: a.RetryCnt, RNRRetry: a.RNRRetry, AV: AVToWire(&a.AV),
	}
	if a.SQDrainNotify {
		w.SQDrainNotify = 1
	}
	return w
}

// AVFromWire and AVToWire convert an address vector (verbs.AHAttr).
func AVFromWire(w *AV) ibv.AHAttr {
	return ibv.AHAttr{DGID: w.DGID, SGID: w.SGID, SGIDIndex: w.SGIDIndex, HopLimit: w.HopLimit,
		TrafficClass: w.TrafficClass, FlowLabel: w.FlowLabel, SL: w.SL, Port: w.Port}
}

// AVToWire is AVFromWire the other way.
func AVToWire(a *ibv.AHAttr) AV {
	return AV{DGID: a.DGID, SGID: a.SGID, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel, SL: a.SL, Port: a.Port}
}
