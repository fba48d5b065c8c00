// Command goclient is a runner that uses the Docker Engine API through the
// moby Go client (github.com/moby/moby/client), as Go agent runners do,
// knowing nothing of tether: it reads DOCKER_HOST like any client
// (client.FromEnv). It is its own module so that tether's go.mod does not
// carry the client's dependencies; the Docker end-to-end tests build it.
//
//	goclient -image IMG -label k=v -n 20 [-network NAME] [-wait]
//
// creates n containers running `sleep 1000` with the label, starts them,
// prints each id on a line, then "ready", and with -wait sleeps until
// killed; without it, it removes them (force) and prints "removed".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

func main() {
	image := flag.String("image", "", "image")
	label := flag.String("label", "", "k=v label of every container")
	n := flag.Int("n", 1, "containers")
	netName := flag.String("network", "", "create this network first and attach the containers")
	wait := flag.Bool("wait", false, "sleep until killed instead of removing them")
	flag.Parse()
	if err := run(*image, *label, *n, *netName, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
}

func run(image, label string, n int, netName string, wait bool) error {
	ctx := context.Background()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	defer cli.Close()
	k, v, _ := strings.Cut(label, "=")
	labels := map[string]string{k: v}
	hc := &container.HostConfig{}
	if netName != "" {
		if _, err := cli.NetworkCreate(ctx, netName, client.NetworkCreateOptions{Labels: labels}); err != nil {
			return fmt.Errorf("network create: %w", err)
		}
		hc.NetworkMode = container.NetworkMode(netName)
	}
	var ids []string
	for range n {
		res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Config:           &container.Config{Image: image, Cmd: []string{"sleep", "1000"}, Labels: labels},
			HostConfig:       hc,
			NetworkingConfig: &network.NetworkingConfig{},
		})
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		fmt.Println(res.ID)
		ids = append(ids, res.ID)
	}
	fmt.Println("ready")
	if wait {
		time.Sleep(time.Hour)
		return nil
	}
	for _, id := range ids {
		if _, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil {
			return fmt.Errorf("remove: %w", err)
		}
	}
	fmt.Println("removed")
	return nil
}
