package daytonatest

import (
	"net/http"
	"strings"
	"time"
)

// RouteAPIKey is GET /api-keys/current: the calling API key's own record.
const RouteAPIKey = "api-key"

// apiKeyJSON is ApiKeyListDto (api-key/dto/api-key-list.dto.ts at v0.190.0).
type apiKeyJSON struct {
	Name        string   `json:"name"`
	Value       string   `json:"value"`
	CreatedAt   string   `json:"createdAt"`
	Permissions []string `json:"permissions"`
	LastUsedAt  *string  `json:"lastUsedAt"`
	ExpiresAt   *string  `json:"expiresAt"`
	UserID      string   `json:"userId"`
}

// currentAPIKey answers GET /api-keys/current as the real server does
// (api-key/api-key.controller.ts:99-117): only an API key may call it (a
// JWT fails the API-key strategy: 401 "Invalid credentials",
// auth/global-auth.guard.ts:64), no permission is required, and the key's
// value comes back masked, its first and last three characters around
// twenty asterisks (api-key-list.dto.ts:62, api-key.service.ts:30-36). A
// key added with AddKey carries both sandbox permissions; one added with
// AddKeyWithPermissions, its own.
func (s *Server) currentAPIKey(w http.ResponseWriter, r *http.Request) {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.Mu.Lock()
	_, isKey := s.Keys[token]
	perms, scoped := s.perms[token]
	s.Mu.Unlock()
	if !isKey {
		writeError(w, r, http.StatusUnauthorized, "Invalid credentials")
		return
	}
	if !scoped {
		perms = []string{PermWriteSandboxes, PermDeleteSandboxes}
	}
	masked := token
	if len(token) >= 6 {
		masked = token[:3] + strings.Repeat("*", 20) + token[len(token)-3:]
	}
	writeJSON(w, http.StatusOK, apiKeyJSON{
		Name: "key", Value: masked, CreatedAt: stamp(time.Now()),
		Permissions: append([]string{}, perms...), UserID: "user",
	})
}
