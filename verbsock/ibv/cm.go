package ibv

// CMState is a connection's CM state (IBA 12.9.6, Figure 160 "CM state
// diagram"; the kernel's enum ib_cm_state), as the daemon's CM table
// reports it.
type CMState uint8

const (
	CMStateIdle CMState = iota
	CMStateREQSent
	CMStateREQRcvd
	CMStateMRAREQSent // passive: we sent MRA for the REQ
	CMStateMRAREQRcvd // active: the peer sent MRA for our REQ
	CMStateREPSent
	CMStateREPRcvd
	CMStateMRAREPSent // active: we sent MRA for the REP (not done here: REP is answered at once)
	CMStateMRAREPRcvd // passive: the peer sent MRA for our REP
	CMStateEstablished
	CMStateDREQSent
	CMStateDREQRcvd
	CMStateTimewait
	CMStateSIDRREQSent
	CMStateSIDRREQRcvd
)

var cmStateNames = [...]string{"IDLE", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT", "MRA_REQ_RCVD", "REP_SENT",
	"REP_RCVD", "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT",
	"SIDR_REQ_SENT", "SIDR_REQ_RCVD"}

func (s CMState) String() string {
	if int(s) < len(cmStateNames) {
		return cmStateNames[s]
	}
	return "?"
}
