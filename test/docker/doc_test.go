// Package docker_test runs tether in real containers on the Docker engine:
// a FROM scratch image built from the static binary, `docker stop` with
// live sandboxes, `docker kill`, PID 1 duties, --init, --user and TLS. The
// simulated Daytona runs on the host; the containers reach it over the
// host's network.
//
// The tests are behind the build tag "docker": they need an engine, build
// an image and take a minute. Run them with
//
//	go test -tags docker -count=1 ./test/docker/
//
// .ci/run does, and fails when the engine is missing there.
package docker_test
