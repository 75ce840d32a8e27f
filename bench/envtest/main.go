// The anchor of the control plane's start: controller-runtime's envtest starting etcd and
// kube-apiserver (Environment.Start, certificates included) and stopping them, N times; one
// line of seconds per start. The programs: $KUBEBUILDER_ASSETS, as envtest's users give them.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	rounds := 1
	if len(os.Args) > 1 {
		parsed, err := strconv.Atoi(os.Args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, "usage: envtest-start [ROUNDS]")
			os.Exit(2)
		}
		rounds = parsed
	}
	for i := 0; i < rounds; i++ {
		env := &envtest.Environment{}
		started := time.Now()
		if _, err := env.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "envtest did not start:", err)
			os.Exit(1)
		}
		fmt.Printf("%.3f\n", time.Since(started).Seconds())
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "envtest did not stop:", err)
			os.Exit(1)
		}
	}
}
