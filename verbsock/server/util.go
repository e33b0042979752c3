package server

import "time"

func sleepBackoff() { time.Sleep(time.Millisecond) }
