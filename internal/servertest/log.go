package servertest

import (
	"bytes"
	"sync"
)

// SyncBuffer is a log written by the server's handlers and read by the
// test: its methods may be called from several goroutines at once. The
// zero value is an empty buffer ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
