// ferrolb-kube: one multicall binary holding the real Kubernetes control plane the
// testbed runs (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kubectl)
// and the kubelet and kube-proxy for `cluster up --kubelets`, linked once instead of
// seven times. The command is the program's own name (a symlink named
// kubectl) or, failing that, the first argument:
//
//	ferrolb-kube kube-apiserver --etcd-servers=... [flags]
//	ferrolb-kube etcd --data-dir=... [flags]
//	kubectl get nodes            (kubectl -> ferrolb-kube)
//
// Nothing here is ferrolb code: each entry point is the upstream main, unchanged.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

const usage = "usage: ferrolb-kube kube-apiserver|kube-controller-manager|kube-scheduler|etcd|kubectl|kubelet|kube-proxy [flags]"

var known = map[string]bool{"kube-apiserver": true, "kube-controller-manager": true, "kube-scheduler": true, "etcd": true, "kubectl": true, "kubelet": true, "kube-proxy": true}

func main() {
	name := filepath.Base(os.Args[0])
	if !known[name] {
		if len(os.Args) < 2 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		name = os.Args[1]
		// Each upstream main reads os.Args as if it were its own binary.
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	switch name {
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "etcd":
		etcdmain.Main(os.Args)
	case "kubelet":
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "kube-proxy":
		os.Exit(cli.Run(proxy.NewProxyCommand()))
	case "kubectl":
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	default:
		fmt.Fprintf(os.Stderr, "ferrolb-kube: unknown command %q\n%s\n", name, usage)
		os.Exit(2)
	}
}
