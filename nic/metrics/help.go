package metrics

// helps are the metrics' HELP texts, in the words of kernel rxe's
// hw_counters (rxe_hw_counters.c) where rxe has the counter.
var helps = map[string]string{
	"sent_pkts":                    "RoCEv2 packets sent",
	"rcvd_pkts":                    "RoCEv2 packets received",
	"duplicate_request":            "Duplicate requests received",
	"out_of_seq_request":           "Out-of-sequence requests received",
	"rcvd_rnr_err":                 "RNR NAKs received",
	"send_rnr_err":                 "RNR NAKs sent",
	"rcvd_seq_err":                 "PSN sequence error NAKs received",
	"retry_exceeded_err":           "Requests failed after retry_cnt retries",
	"retry_rnr_exceeded_err":       "Requests failed after rnr_retry RNR retries",
	"completer_retry_err":          "Retries the completer started",
	"send_err":                     "Send requests completed in error",
	"retransmit_timeouts":          "Retransmit timer expiries with a PSN outstanding",
	"retransmitted_pkts":           "Packets retransmitted",
	"local_ops_executed":           "Local operations (REG_MR, LOCAL_INV, BIND_MW) run",
	"local_op_replays":             "Local operations reached a second time (must stay 0)",
	"mr_changed_under_unacked_wqe": "MRs changed under a WQE not yet acknowledged",
	"icrc_errors":                  "Packets received with a wrong ICRC",
	"rcvd_dropped":                 "Packets dropped (bad Q_Key, no WQE on UD, UC gap, ...)",
	"naks_sent":                    "NAKs sent",
	"closed_qp_acks":               "Duplicates a destroyed QP acknowledged again",
	"capture_dropped_frames":       "Frames live capture dropped because a reader's queue was full",
	"capture_frames":               "Frames live capture queued for readers",
	"link_rx_ring_drops":           "Frames the kernel dropped because a raw-mode receive ring was full",
	"link_rx_truncated":            "Frames longer than a raw-mode receive ring slot, dropped",
}

func help(name string) string {
	if h, ok := helps[name]; ok {
		return h
	}
	return "Counter " + name
}
