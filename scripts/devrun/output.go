package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// console is the terminal side of a run: colours (when stdout is a terminal
// and NO_COLOR is unset), the "[run 1.2s]" lines, and the one lock every
// prefixed child line takes, so that lines of different programs never
// interleave mid-line.
type console struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
	color bool
}

const (
	cReset   = "\x1b[0m"
	cBold    = "\x1b[1m"
	cDim     = "\x1b[2m"
	cRed     = "\x1b[31m"
	cGreen   = "\x1b[32m"
	cYellow  = "\x1b[33m"
	cBlue    = "\x1b[34m"
	cMagenta = "\x1b[35m"
	cCyan    = "\x1b[36m"
)

func newConsole() *console {
	color := false
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("NO_COLOR") == "" {
		color = true
	}
	return &console{out: os.Stdout, start: time.Now(), color: color}
}

// paint wraps s in the colour code when colours are on.
func (c *console) paint(code, s string) string {
	if !c.color {
		return s
	}
	return code + s + cReset
}

func (c *console) stamp() string {
	return c.paint(cGreen, fmt.Sprintf("[run %.1fs]", time.Since(c.start).Seconds()))
}

func (c *console) write(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = io.WriteString(c.out, s)
}

// say is a step of the run (bold).
func (c *console) say(format string, args ...any) {
	c.write(c.stamp() + " " + c.paint(cBold, fmt.Sprintf(format, args...)) + "\n")
}

// note is a detail of a step.
func (c *console) note(format string, args ...any) {
	c.write(c.stamp() + " " + fmt.Sprintf(format, args...) + "\n")
}

func (c *console) warn(format string, args ...any) {
	c.write(c.paint(cYellow, fmt.Sprintf("[run %.1fs] warning:", time.Since(c.start).Seconds())) + " " + fmt.Sprintf(format, args...) + "\n")
}

func (c *console) errorf(format string, args ...any) {
	c.write(c.paint(cRed, fmt.Sprintf("[run %.1fs] error:", time.Since(c.start).Seconds())) + " " + fmt.Sprintf(format, args...) + "\n")
}

// tag is the coloured "[name] " prefix of a program's lines.
func (c *console) tag(name string) string {
	code := map[string]string{"ingestor": cCyan, "relay": cMagenta, "broker": cBlue, "watch": cYellow}[name]
	if code == "" {
		return "[" + name + "] "
	}
	return c.paint(code, "["+name+"]") + " "
}

// prefixer copies a program's output line by line to the console, each line
// behind the program's tag, and, when log is set, unprefixed to its log file.
type prefixer struct {
	c      *console
	prefix string
	log    *os.File

	mu      sync.Mutex
	partial []byte
}

func (c *console) prefixer(name string, log *os.File) *prefixer {
	return &prefixer{c: c, prefix: c.tag(name), log: log}
}

func (p *prefixer) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		p.line(p.partial[:i+1])
		p.partial = p.partial[i+1:]
	}
	return len(b), nil
}

func (p *prefixer) line(l []byte) {
	p.c.write(p.prefix + string(l))
	if p.log != nil {
		_, _ = p.log.Write(l)
	}
}

// Close writes an unterminated last line and closes the log file.
func (p *prefixer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.partial) > 0 {
		p.line(append(p.partial, '\n'))
		p.partial = nil
	}
	if p.log != nil {
		return p.log.Close()
	}
	return nil
}
