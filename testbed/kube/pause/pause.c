/* The pod sandbox ("pause") process for the testbed's real kubelets: holds the pod's
 * namespaces, reaps orphans, exits on SIGINT/SIGTERM. Built with gcc -static; the
 * whole image is this one file. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
	struct sigaction q = {.sa_handler = quit}, r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
	sigaction(SIGINT, &q, 0);
	sigaction(SIGTERM, &q, 0);
	sigaction(SIGCHLD, &r, 0);
	for (;;) pause();
}
