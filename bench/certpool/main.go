// Command certpool times the first x509.SystemCertPool() of a process: the
// load of the system's CA certificates that tether's start-up provider
// check makes for an https API URL (docs/benchmarks.md). The pool is cached
// after the first call, so each run measures one load.
//
//	go run ./bench/certpool
//	SSL_CERT_FILE=/nonexistent SSL_CERT_DIR=/nonexistent go run ./bench/certpool
package main

import (
	"crypto/x509"
	"fmt"
	"time"
)

func main() {
	start := time.Now()
	pool, err := x509.SystemCertPool()
	took := time.Since(start)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Printf("SystemCertPool: %s, empty: %v\n", took, pool.Equal(x509.NewCertPool()))
}
