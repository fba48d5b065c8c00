package daytonatest

// Touch records activity on a sandbox now, as a request through Daytona's
// proxy or toolbox would: its lastActivityAt becomes the server's now, and
// the list shows it (after any list lag).
func (s *Server) Touch(id string) error {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	r, now, err := s.recordLocked(id)
	if err != nil {
		return err
	}
	r.noteActivity(now)
	return nil
}
