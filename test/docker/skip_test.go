//go:build !docker

package docker_test

import "testing"

func TestDockerEngine(t *testing.T) {
	t.Skip("SKIP: the Docker engine tests are behind a build tag: go test -tags docker -count=1 ./test/docker/")
}
