package proctest

import (
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestLinesWait(t *testing.T) {
	l := NewLines()
	r, w := io.Pipe()
	done := make(chan struct{})
	go func() { l.Consume(r); close(done) }()
	io.WriteString(w, "a\nb\n")
	is := func(want string) func(string) bool { return func(s string) bool { return s == want } }
	if line, next, ok := l.Wait(0, 5*time.Second, is("b")); !ok || line != "b" || next != 2 {
		t.Fatalf("Wait b = %q %d %v", line, next, ok)
	}
	if _, _, ok := l.Wait(2, 50*time.Millisecond, is("a")); ok {
		t.Fatal("Wait from 2 found a line before it")
	}
	go io.WriteString(w, "c\n")
	if line, next, ok := l.Wait(l.Len()-1, 5*time.Second, is("c")); !ok || line != "c" || next != 3 {
		t.Fatalf("Wait c = %q %d %v", line, next, ok)
	}
	w.Close()
	<-done
	start := time.Now()
	if _, _, ok := l.Wait(0, time.Minute, is("d")); ok || time.Since(start) > 10*time.Second {
		t.Fatalf("Wait after the end: ok %v after %v", ok, time.Since(start))
	}
	if l.String() != "a\nb\nc\n" {
		t.Errorf("String = %q", l.String())
	}
}

func TestStart(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo hello; exit 3")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	l := NewLines()
	done := make(chan error, 1)
	if err := Start(cmd, func() { l.Consume(out); done <- cmd.Wait() }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; cmd.ProcessState.ExitCode() != 3 || !strings.Contains(l.String(), "hello") {
		t.Errorf("exit %v, output %q", err, l.String())
	}
	if err := Start(exec.Command("/nonexistent/program"), func() { t.Error("life ran for a failed start") }); err == nil {
		t.Error("Start of a missing program succeeded")
	}
}
