package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func init() {
	register(&command{
		Name:    "impair",
		Args:    "[--loss P] [--dup P] [--reorder P] [--corrupt P] [--delay D] [--qp QPN] [--direction in|out|both] | off [--socket PATH]",
		Summary: "inject faults into the port's RoCEv2 frames (loss, duplication, reordering, corruption, delay), show them, or end them",
		NArgs:   -1,
		Setup: func(fs *flag.FlagSet) runFunc {
			var im verbs.Impairment
			var set bool
			prob := func(name, what string, dst *float64) {
				fs.Func(name, what+" this share of the frames, in percent (1 or 1%: one frame in a hundred)", func(s string) error {
					p, err := parsePercent(s)
					*dst, set = p, true
					return err
				})
			}
			prob("loss", "drop", &im.Loss)
			prob("dup", "send or deliver twice", &im.Dup)
			prob("reorder", "send after the next frame", &im.Reorder)
			prob("corrupt", "flip one bit of (the ICRC check then drops it)", &im.Corrupt)
			fs.Func("delay", "hold every sent frame back this long (e.g. 2ms; at most 10s)", func(s string) error {
				d, err := time.ParseDuration(s)
				im.Delay, set = d, true
				return err
			})
			fs.Func("qp", "only the frames of this QP (received for it, sent by it); default every QP", func(s string) error {
				n, err := strconv.ParseUint(s, 0, 24)
				im.QPN, set = uint32(n), true
				return err
			})
			fs.StringVar(&im.Direction, "direction", "both", "the frames impaired: in (received), out (sent) or both; delay and reordering apply to sent frames")
			return withDeviceArgs(fs, func(d *verbs.Device, args []string, stdout io.Writer) error {
				switch {
				case len(args) == 1 && args[0] == "off" && !set:
					if _, _, err := d.SetImpairment(nil); err != nil {
						return err
					}
					fmt.Fprintln(stdout, "impairment: off")
					return nil
				case len(args) > 0:
					return errors.New("impair takes flags, or off alone")
				case set:
					cur, on, err := d.SetImpairment(&im)
					if err != nil {
						return err
					}
					fmt.Fprintln(stdout, impairText(cur, on))
					return nil
				}
				cur, on, err := d.Impairment()
				if err != nil {
					return err
				}
				fmt.Fprintln(stdout, impairText(cur, on))
				return nil
			})
		},
	})
}

// parsePercent reads "1", "1%" or "0.5%" as a share (0.01, 0.005).
func parsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || v < 0 || v > 100 {
		return 0, fmt.Errorf("%q: a percentage from 0 to 100", s)
	}
	return v / 100, nil
}

// impairText is the one line that says what is done to the port's frames.
func impairText(im verbs.Impairment, on bool) string {
	if !on {
		return "impairment: off"
	}
	var parts []string
	for _, p := range []struct {
		n string
		v float64
	}{{"loss", im.Loss}, {"dup", im.Dup}, {"reorder", im.Reorder}, {"corrupt", im.Corrupt}} {
		if p.v > 0 {
			parts = append(parts, fmt.Sprintf("%s %s%%", p.n, strconv.FormatFloat(p.v*100, 'f', -1, 64)))
		}
	}
	if im.Delay > 0 {
		parts = append(parts, "delay "+im.Delay.String())
	}
	who := "every QP"
	if im.QPN != 0 {
		who = fmt.Sprintf("QP %#x", im.QPN)
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing")
	}
	return fmt.Sprintf("impairment: ON, %s, frames %s, %s", strings.Join(parts, ", "), im.Direction, who)
}
