package backoff

import (
	"sync"
	"testing"
	"time"
)

func TestPatience(t *testing.T) {
	p := NewPatience(2*time.Second, 5*time.Second)
	if got := p.Wait(); got != 2*time.Second {
		t.Fatalf("before any answer: %s, want the minimum 2s", got)
	}
	p.Answered(time.Millisecond)
	if got := p.Wait(); got != 2*time.Second {
		t.Fatalf("after a fast answer: %s, want 2s", got)
	}
	p.Missed()
	p.Missed()
	if got := p.Wait(); got != 5*time.Second {
		t.Fatalf("after two misses: %s, want 2s doubled twice, capped at 5s", got)
	}
	p.Answered(time.Millisecond)
	if got := p.Wait(); got != 2*time.Second {
		t.Fatalf("an answer ends the misses: %s, want 2s", got)
	}

	slow := NewPatience(time.Second, 10*time.Second)
	slow.Answered(2 * time.Second)
	if got := slow.Wait(); got != 8*time.Second {
		t.Fatalf("a link answering in 2s: %s, want 4 x 2s", got)
	}
	for range 20 {
		slow.Answered(10 * time.Millisecond)
	}
	if got := slow.Wait(); got != time.Second {
		t.Fatalf("after the link got fast again: %s, want the minimum", got)
	}
	for range 100 {
		slow.Missed()
	}
	if got := slow.Wait(); got != 10*time.Second {
		t.Fatalf("many misses: %s, want the maximum", got)
	}
}

func TestPatienceConcurrent(t *testing.T) {
	p := NewPatience(time.Second, 4*time.Second)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 1000 {
				if i%2 == 0 {
					p.Answered(time.Duration(i) * time.Millisecond)
				} else {
					p.Missed()
				}
				if w := p.Wait(); w < time.Second || w > 4*time.Second {
					t.Errorf("wait %s outside [1s, 4s]", w)
					return
				}
			}
		})
	}
	wg.Wait()
}
