package server

// Refusing is how many refused connections are waiting for their first
// request (tests of the connection bounds).
func Refusing(s *Server) int { return len(s.refusing) }
