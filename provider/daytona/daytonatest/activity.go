package daytonatest

import "fmt"

// Touch records activity on a sandbox now, as a request through Daytona's
// proxy or toolbox would: its lastActivityAt becomes the server's now, and
// the list shows it (after any list lag).
func (s *Server) Touch(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.sandboxes[id]
	if !ok {
		return fmt.Errorf("daytonatest: no sandbox %s", id)
	}
	now := s.now()
	r.advance(now)
	r.noteActivity(now)
	return nil
}
