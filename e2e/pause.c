/* PID 1 of each pod sandbox on make e2e's node: it holds the pod's namespaces, reaps
 * orphaned children and exits on SIGINT or SIGTERM. Built with gcc -static by e2e/node_tools.sh. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { (void)sig; _exit(0); }

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {0}, child = {0};
  stop.sa_handler = on_stop;
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGINT, &stop, NULL) != 0 || sigaction(SIGTERM, &stop, NULL) != 0 ||
      sigaction(SIGCHLD, &child, NULL) != 0)
    return 1;
  for (;;) pause();
}
