package serve

import "net/http"

// Handle mounts an application's handler beside the API (a kiosk's page,
// a health view): behind the same bearer token, counted and logged like
// the API's routes. pattern is an http.ServeMux pattern ("GET /{$}"); one
// the API already serves panics, as ServeMux does. It may be called while
// the server serves.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.route(pattern, func(w *responseWriter, r *http.Request) { h.ServeHTTP(w, r) })
}
